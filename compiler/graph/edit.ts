/**
 * A thin helper for passes that append nodes to an IR graph: one short method per primitive op, so a
 * rewrite reads like the math it implements (`b.mul(g, b.sub(one, b.mul(y, y)))`). Every node still goes
 * through `Graph.add`, so types are inferred and checked exactly as for model-built nodes.
 */
import { type DType, type Graph, type NodeId, sameShape, type TensorType } from "../../ir/mod.ts";
import type { Attrs } from "../../ir/ops.ts";

export class GraphEditor {
  /** Source location stamped on new nodes (a pass sets it to the forward node's line it expands). */
  loc: string | undefined;
  // Constants are pure, so one node per (value, type) is enough; this keeps rewrites from growing a
  // fresh zero tensor for every `where`.
  private readonly consts = new Map<string, NodeId>();

  constructor(readonly graph: Graph) {}

  type(x: NodeId): TensorType {
    return this.graph.nodes[x].type;
  }

  shape(x: NodeId): readonly number[] {
    return this.graph.nodes[x].type.shape;
  }

  node(op: string, inputs: readonly NodeId[], attrs: Attrs = {}, declared?: TensorType): NodeId {
    return this.graph.add(op, inputs, attrs, declared, this.loc);
  }

  /** A tensor of `type` filled with `value`, shared with earlier requests for the same constant. */
  constLike(value: number, type: TensorType): NodeId {
    const key = `${Object.is(value, -0) ? "-0" : value}:${type.dtype}[${type.shape.join(",")}]`;
    let id = this.consts.get(key);
    if (id === undefined) {
      id = this.graph.add("const", [], { value }, { shape: [...type.shape], dtype: type.dtype });
      this.consts.set(key, id);
    }
    return id;
  }

  full(value: number, shape: readonly number[], dtype: DType): NodeId {
    return this.constLike(value, { shape, dtype });
  }

  // ---- elementwise ---------------------------------------------------------------------------
  neg = (x: NodeId) => this.node("neg", [x]);
  exp = (x: NodeId) => this.node("exp", [x]);
  cast = (x: NodeId, to: DType) => this.node("cast", [x], { to });
  add = (a: NodeId, b: NodeId) => this.node("add", [a, b]);
  sub = (a: NodeId, b: NodeId) => this.node("sub", [a, b]);
  mul = (a: NodeId, b: NodeId) => this.node("mul", [a, b]);
  div = (a: NodeId, b: NodeId) => this.node("div", [a, b]);
  eq = (a: NodeId, b: NodeId) => this.node("eq", [a, b]);
  lt = (a: NodeId, b: NodeId) => this.node("lt", [a, b]);
  le = (a: NodeId, b: NodeId) => this.node("le", [a, b]);
  ge = (a: NodeId, b: NodeId) => this.node("ge", [a, b]);
  where = (c: NodeId, a: NodeId, b: NodeId) => this.node("where", [c, a, b]);

  /** x times a scalar constant broadcast to x's type. */
  scale(x: NodeId, k: number): NodeId {
    return this.mul(x, this.constLike(k, this.type(x)));
  }

  // ---- reductions and movement -----------------------------------------------------------------
  reduceSum = (x: NodeId, axes: readonly number[]) => this.node("reduce_sum", [x], { axes: [...axes] });
  permute = (x: NodeId, perm: readonly number[]) => this.node("permute", [x], { perm: [...perm] });
  slice = (x: NodeId, start: readonly number[], end: readonly number[]) =>
    this.node("slice", [x], { start: [...start], end: [...end] });
  pad = (x: NodeId, low: readonly number[], high: readonly number[]) =>
    this.node("pad", [x], { low: [...low], high: [...high] });

  /** Reshape, or x itself when it already has that shape (no identity nodes in rewrites). */
  reshape(x: NodeId, shape: readonly number[]): NodeId {
    return sameShape(this.shape(x), shape) ? x : this.node("reshape", [x], { shape: [...shape] });
  }

  /** Broadcast, or x itself when it already has that shape. */
  broadcast(x: NodeId, shape: readonly number[]): NodeId {
    return sameShape(this.shape(x), shape) ? x : this.node("broadcast", [x], { shape: [...shape] });
  }

  matmul = (a: NodeId, b: NodeId, transposeA = false, transposeB = false) =>
    this.node("matmul", [a, b], { transpose_a: transposeA, transpose_b: transposeB });
  gather = (table: NodeId, idx: NodeId) => this.node("gather", [table, idx]);
  scatterAdd = (idx: NodeId, upd: NodeId, rows: number) => this.node("scatter_add", [idx, upd], { rows });
}
