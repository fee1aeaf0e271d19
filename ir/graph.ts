/**
 * The tensor graph: SSA nodes in topological order. A node's id is its index in `nodes`, and every
 * operand id is smaller than the id of the node that uses it, so one forward walk visits producers
 * before consumers.
 */
import type { TensorType } from "./dtype.ts";
import { IRError } from "./errors.ts";
import { type Attrs, checkAttrs, isOpName, type OpDef, type OpName, OPS } from "./ops.ts";

export type NodeId = number;

/**
 * The mixed-precision mode a graph was prepared for (compiler/training_graph/mixed_precision.ts): "fp32",
 * or GEMMs on f16/bf16 operands. Carried by the graph so that the compiler's storage policy is told, not
 * left to guess it from the casts; every pass that rebuilds a graph copies it (the stage runner checks).
 */
export type MixedPrecision = "fp32" | "fp16" | "bf16";

/**
 * Nodes one pass built together, by role and in full (compiler/passes/decompose.ts: an attention's
 * primitives), so later stages are told the structure instead of matching it; every rebuild remaps them.
 */
export interface NodeGroup {
  readonly kind: string;
  readonly roles: Readonly<Record<string, NodeId>>;
  readonly nodes: readonly NodeId[];
  readonly attrs: Attrs;
}

export interface Node {
  readonly id: NodeId;
  readonly op: OpName;
  readonly inputs: readonly NodeId[];
  readonly type: TensorType;
  readonly attrs: Attrs;
  /** Where in a model file the node was made ("models/bert.ts:42"), when known. */
  readonly loc?: string;
}

export class Graph {
  readonly nodes: Node[] = [];
  /** Named results, in insertion order. */
  readonly outputs = new Map<string, NodeId>();
  readonly groups: NodeGroup[] = [];

  constructor(public name: string, readonly precision: MixedPrecision = "fp32") {}

  node(id: NodeId): Node {
    const n = this.nodes[id];
    if (!n) throw new IRError(`no node %${id} in graph '${this.name}'`);
    return n;
  }

  /**
   * Appends a node after checking its attributes and computing its type from the op table. `declared`
   * is the result type of source ops and random_uniform; other ops ignore it except for checking.
   */
  add(op: string, inputs: readonly NodeId[], attrs: Attrs = {}, declared?: TensorType, loc?: string): NodeId {
    if (!isOpName(op)) throw new IRError(`unknown op '${op}'`);
    const def: OpDef = OPS[op];
    if (def.arity >= 0 ? inputs.length !== def.arity : inputs.length === 0) {
      throw new IRError(
        `${op}: expects ${def.arity >= 0 ? def.arity : "one or more"} operands, got ${inputs.length}`,
      );
    }
    const bad = checkAttrs(op, attrs);
    if (bad) throw new IRError(`${op}: ${bad}`);
    const id = this.nodes.length;
    const ins = inputs.map((i) => {
      if (!(i >= 0 && i < id)) throw new IRError(`${op}: operand %${i} is not defined before %${id}`);
      return this.nodes[i].type;
    });
    let type: TensorType;
    try {
      type = def.infer(ins, attrs, declared);
    } catch (e) {
      if (e instanceof IRError) throw new IRError(`${op}: ${e.message}`);
      throw e;
    }
    const node: Node = loc === undefined
      ? { id, op, inputs: [...inputs], type, attrs }
      : { id, op, inputs: [...inputs], type, attrs, loc };
    this.nodes.push(node);
    return id;
  }

  setOutput(name: string, id: NodeId): void {
    this.node(id);
    this.outputs.set(name, id);
  }

  /** Ids of the nodes of the given source op, keyed by their `name` attribute. */
  sources(op: "input" | "param"): Map<string, Node> {
    const m = new Map<string, Node>();
    for (const n of this.nodes) if (n.op === op) m.set(n.attrs.name as string, n);
    return m;
  }

  /** Number of uses of each node (outputs count as uses). */
  useCounts(): Int32Array {
    const uses = new Int32Array(this.nodes.length);
    for (const n of this.nodes) for (const i of n.inputs) uses[i]++;
    for (const id of this.outputs.values()) uses[id]++;
    return uses;
  }
}
