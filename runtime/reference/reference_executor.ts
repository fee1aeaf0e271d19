/**
 * The reference interpreter as a stateful step executor, with the same surface the device executors give the
 * training driver: write inputs and parameters by name, step, read outputs and state. After each step the
 * `new:<name>` outputs become the values of `<name>`, as the plans' update copies do — including a flat
 * vector assembled from parameters (`flat.params`), whose new value is split back into the parameters. Slow
 * and exact (f32 rounding of every op): the fallback when no GPU or WebGPU adapter is present, and a second
 * opinion for tests.
 */
import { type Graph, IRError, type NodeId, numel } from "../../ir/mod.ts";
import { UPDATE_PREFIX } from "../../plan/plan.ts";
import { evaluate } from "./interpreter.ts";

/** A range of a flat output that holds an input or parameter (through reshapes). */
interface Piece {
  readonly name: string;
  readonly offset: number;
  readonly size: number;
}

export class ReferenceExecutor {
  private readonly values = new Map<string, Float64Array>();
  private outputs = new Map<string, Float64Array>();
  private readonly sources = new Map<string, number>();
  private readonly pieces = new Map<string, Piece[]>();

  constructor(readonly graph: Graph) {
    for (const n of graph.nodes) {
      if (n.op === "input" || n.op === "param") this.sources.set(String(n.attrs.name), numel(n.type.shape));
    }
    for (const [name, id] of graph.outputs) {
      const flat = this.piecesOf(id);
      if (flat) this.pieces.set(name, flat);
    }
  }

  /** For an output that is a concat of (reshaped) sources: where each source sits in it. */
  private piecesOf(id: NodeId): Piece[] | undefined {
    const n = this.graph.nodes[id];
    if (n.op !== "concat" || n.type.shape.length !== 1) return undefined;
    const out: Piece[] = [];
    let offset = 0;
    for (const inp of n.inputs) {
      let at = inp;
      while (this.graph.nodes[at].op === "reshape") at = this.graph.nodes[at].inputs[0];
      const src = this.graph.nodes[at];
      const size = numel(this.graph.nodes[inp].type.shape);
      if (src.op === "input" || src.op === "param") out.push({ name: String(src.attrs.name), offset, size });
      offset += size;
    }
    return out;
  }

  write(name: string, data: ArrayLike<number>): void {
    const pieces = this.pieces.get(name);
    if (pieces) {
      // A flat vector made of parameters: writing it writes each of them.
      for (const p of pieces) {
        this.write(p.name, Array.prototype.slice.call(data, p.offset, p.offset + p.size));
      }
      return;
    }
    const size = this.sources.get(name);
    if (size === undefined) throw new IRError(`graph ${this.graph.name} has no input or parameter '${name}'`);
    if (data.length !== size) throw new IRError(`'${name}' takes ${size} values, got ${data.length}`);
    this.values.set(name, Float64Array.from(data));
  }

  read(name: string): Promise<Float64Array> {
    const v = this.values.get(name) ?? this.outputs.get(name) ?? this.assembled(name);
    if (!v) throw new IRError(`graph ${this.graph.name}: nothing named '${name}' has a value yet`);
    return Promise.resolve(v);
  }

  /** A flat output made of sources, read between steps: assembled from their current values. */
  private assembled(name: string): Float64Array | undefined {
    const pieces = this.pieces.get(name);
    if (!pieces) return undefined;
    const id = this.graph.outputs.get(name)!;
    const out = new Float64Array(numel(this.graph.nodes[id].type.shape));
    for (const p of pieces) out.set(this.values.get(p.name) ?? new Float64Array(p.size), p.offset);
    return out;
  }

  step(): Promise<void> {
    const feeds = Object.fromEntries(this.values);
    this.outputs = evaluate(this.graph, feeds, { precision: "f32" });
    for (const [name, value] of this.outputs) {
      if (!name.startsWith(UPDATE_PREFIX)) continue;
      const target = name.slice(UPDATE_PREFIX.length);
      const pieces = this.pieces.get(target);
      if (pieces) {
        for (const p of pieces) this.values.set(p.name, value.slice(p.offset, p.offset + p.size));
      } else if (this.sources.has(target)) {
        this.values.set(target, value);
      } else {
        throw new IRError(`output '${name}' updates nothing named '${target}'`);
      }
    }
    for (const name of this.pieces.keys()) this.outputs.delete(name); // read them assembled, after the update
    return Promise.resolve();
  }

  destroy(): void {
    this.values.clear();
    this.outputs.clear();
  }
}
