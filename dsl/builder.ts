/**
 * The model builder: the one object a model file talks to. It owns the graph being built, hands out
 * `Tensor`s, and turns IR errors into `ModelError`s that name the op, the operand shapes and the line of
 * the model file that made the bad call.
 */
import { type DType, Graph, IRError, type NodeId, type TensorType, typeToString } from "../ir/mod.ts";
import type { Attrs } from "../ir/ops.ts";
import { Tensor } from "./tensor.ts";

export class ModelError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelError";
  }
}

/** How a parameter starts before training (the runtime draws the values; the IR records the rule). */
export type Init = "zeros" | "ones" | { truncNormal: number };

function initToString(init: Init): string {
  return typeof init === "string" ? init : `trunc_normal(${init.truncNormal})`;
}

// Files in these folders are the DSL's own; the first other frame is the model code to blame.
const INTERNAL_FILE = /[\\/](dsl|ir)[\\/][^\\/]+\.ts$/;

interface CallSite {
  getFileName(): string | null | undefined;
  getLineNumber(): number | null;
}
type StackHook = (e: Error, sites: CallSite[]) => unknown;

/** The first stack frame outside dsl/ and ir/, as "path/relative/to/cwd.ts:line". */
export function callerLocation(): string | undefined {
  // V8's call sites rather than the formatted stack: formatting every frame was most of the cost
  // (BERT-large's 8,700 nodes took 0.5 s), and only the first frame outside the DSL is read.
  const E = Error as unknown as { prepareStackTrace?: StackHook; stackTraceLimit: number };
  const hook = E.prepareStackTrace, limit = E.stackTraceLimit;
  // Composites nest deeply; the default limit of 10 frames can stop short of the model file.
  E.stackTraceLimit = 64;
  E.prepareStackTrace = (_e, sites) => sites;
  const holder: { stack?: unknown } = {};
  Error.captureStackTrace(holder, callerLocation);
  const sites = holder.stack as CallSite[];
  E.prepareStackTrace = hook;
  E.stackTraceLimit = limit;
  for (const site of sites) {
    const file = site.getFileName()?.replace(/^file:\/\//, "");
    if (!file?.startsWith("/") || !/\.[jt]s$/.test(file) || INTERNAL_FILE.test(file)) continue;
    const cwd = Deno.cwd() + "/";
    return `${file.startsWith(cwd) ? file.slice(cwd.length) : file}:${site.getLineNumber()}`;
  }
  return undefined;
}

export interface BuilderOptions {
  /** Record the model-file line of every node (for dumps); errors always carry it. */
  trackLocations?: boolean;
}

export class ModelBuilder {
  readonly graph: Graph;
  private nextStream = 0;
  private readonly trackLocations: boolean;

  constructor(name: string, opts: BuilderOptions = {}) {
    this.graph = new Graph(name);
    this.trackLocations = opts.trackLocations ?? false;
  }

  /** Adds a node, converting IR errors into ModelErrors located in the model file. */
  node(op: string, inputs: readonly Tensor[], attrs: Attrs = {}, declared?: TensorType): Tensor {
    for (const t of inputs) {
      if (t.builder !== this) throw new ModelError(`${op}: operand comes from another model builder`);
    }
    try {
      const loc = this.trackLocations ? callerLocation() : undefined;
      const id = this.graph.add(op, inputs.map((t) => t.id), attrs, declared, loc);
      return new Tensor(this, id);
    } catch (e) {
      if (!(e instanceof IRError)) throw e;
      const where = callerLocation();
      const shapes = inputs.map((t) => typeToString(t.type)).join(", ");
      const msg = e.message.startsWith(`${op}:`) ? e.message : `${op}: ${e.message}`;
      throw new ModelError(`${msg} (operands: ${shapes || "none"})${where ? ` at ${where}` : ""}`);
    }
  }

  wrap(id: NodeId): Tensor {
    this.graph.node(id);
    return new Tensor(this, id);
  }

  input(name: string, dtype: DType, shape: readonly number[]): Tensor {
    return this.node("input", [], { name }, { dtype, shape: [...shape] });
  }

  param(name: string, shape: readonly number[], init: Init, dtype: DType = "f32"): Tensor {
    return this.node("param", [], { name, init: initToString(init) }, { dtype, shape: [...shape] });
  }

  /** A tensor of the given shape with every element equal to value. */
  full(value: number, shape: readonly number[], dtype: DType = "f32"): Tensor {
    return this.node("const", [], { value }, { dtype, shape: [...shape] });
  }

  iota(shape: readonly number[], axis: number, dtype: DType = "i32"): Tensor {
    return this.node("iota", [], { axis }, { dtype, shape: [...shape] });
  }

  /**
   * Uniform [0,1) numbers from the counter-based generator. Each call gets its own stream id, in build
   * order, so the same model always draws the same streams and backward passes can regenerate masks.
   */
  randomUniform(key: Tensor, shape: readonly number[]): Tensor {
    return this.node("random_uniform", [key], { stream: this.nextStream++ }, {
      dtype: "f32",
      shape: [...shape],
    });
  }

  /**
   * dropout(softmax(q·kᵀ·scale + mask))·v as one `attention` op (compiler/passes/decompose.ts has its
   * primitives); dropout draws a stream of its own, as `randomUniform` does, when it applies.
   */
  attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: number, p: number, key?: Tensor): Tensor {
    const drops = p > 0 && key !== undefined;
    const attrs: Attrs = drops ? { scale, dropout: p, stream: this.nextStream++ } : { scale, dropout: 0 };
    return this.node("attention", drops ? [q, k, v, mask, key] : [q, k, v, mask], attrs);
  }

  where(cond: Tensor, a: Tensor | number, b: Tensor | number): Tensor {
    const ta = typeof a === "number" ? undefined : a;
    const tb = typeof b === "number" ? undefined : b;
    const like = ta ?? tb;
    if (!like) throw new ModelError(`where: at least one branch must be a tensor${locSuffix()}`);
    const shape = broadcastShapes("where", [
      cond.shape,
      ...(ta ? [ta.shape] : []),
      ...(tb ? [tb.shape] : []),
    ]);
    const x = ta ? ta.broadcastTo(shape) : this.full(a as number, shape, like.dtype);
    const y = tb ? tb.broadcastTo(shape) : this.full(b as number, shape, like.dtype);
    return this.node("where", [cond.broadcastTo(shape), x, y]);
  }

  concat(parts: readonly Tensor[], axis: number): Tensor {
    if (parts.length === 0) throw new ModelError(`concat: needs at least one operand${locSuffix()}`);
    return this.node("concat", parts, { axis: normAxis("concat", axis, parts[0].rank) });
  }

  /** Zeros [rows, ...rest] with `updates` [...I, ...rest] added at integer `indices` [...I]. */
  scatterAdd(indices: Tensor, updates: Tensor, rows: number): Tensor {
    return this.node("scatter_add", [indices, updates], { rows });
  }

  output(name: string, t: Tensor): void {
    if (this.graph.outputs.has(name)) throw new ModelError(`output '${name}' is defined twice${locSuffix()}`);
    this.graph.setOutput(name, t.id);
  }
}

export function locSuffix(): string {
  const where = callerLocation();
  return where ? ` at ${where}` : "";
}

export function normAxis(op: string, axis: number, rank: number): number {
  const a = axis < 0 ? axis + rank : axis;
  if (!Number.isInteger(a) || a < 0 || a >= rank) {
    throw new ModelError(`${op}: axis ${axis} is out of range for rank ${rank}${locSuffix()}`);
  }
  return a;
}

/** The numpy broadcast of several shapes, or a ModelError naming the op and the shapes. */
export function broadcastShapes(op: string, shapes: readonly (readonly number[])[]): number[] {
  const rank = Math.max(...shapes.map((s) => s.length));
  const out = new Array<number>(rank).fill(1);
  for (const s of shapes) {
    const off = rank - s.length;
    s.forEach((d, i) => {
      const cur = out[off + i];
      if (cur === 1) out[off + i] = d;
      else if (d !== 1 && d !== cur) {
        throw new ModelError(
          `${op}: shapes ${
            shapes.map((x) => `[${x.join(",")}]`).join(" and ")
          } do not broadcast${locSuffix()}`,
        );
      }
    });
  }
  return out;
}
