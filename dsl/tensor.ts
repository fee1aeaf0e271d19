/**
 * A handle on a graph node with methods that read like the math: `x.sub(mean).mul(x.sub(mean).rsqrt())`.
 * Binary methods broadcast numpy-style (inserting explicit `broadcast` nodes, since IR ops take equal
 * shapes) and accept plain numbers, which become constants of the other operand's dtype. Reductions
 * keep the reduced axes with size 1 unless asked not to. Negative axes count from the end.
 */
import { type DType, type NodeId, numel, type TensorType } from "../ir/mod.ts";
import { broadcastShapes, locSuffix, type ModelBuilder, ModelError, normAxis } from "./builder.ts";

export type TensorLike = Tensor | number;

export class Tensor {
  constructor(readonly builder: ModelBuilder, readonly id: NodeId) {}

  get type(): TensorType {
    return this.builder.graph.nodes[this.id].type;
  }
  get shape(): readonly number[] {
    return this.type.shape;
  }
  get dtype(): DType {
    return this.type.dtype;
  }
  get rank(): number {
    return this.type.shape.length;
  }

  // ---- elementwise ---------------------------------------------------------------------------
  private binary(op: string, other: TensorLike): Tensor {
    if (typeof other === "number") {
      return this.builder.node(op, [this, this.builder.full(other, this.shape, this.dtype)]);
    }
    const shape = broadcastShapes(op, [this.shape, other.shape]);
    return this.builder.node(op, [this.broadcastTo(shape), other.broadcastTo(shape)]);
  }
  private unary(op: string): Tensor {
    return this.builder.node(op, [this]);
  }

  add(o: TensorLike): Tensor {
    return this.binary("add", o);
  }
  sub(o: TensorLike): Tensor {
    return this.binary("sub", o);
  }
  mul(o: TensorLike): Tensor {
    return this.binary("mul", o);
  }
  div(o: TensorLike): Tensor {
    return this.binary("div", o);
  }
  maximum(o: TensorLike): Tensor {
    return this.binary("max", o);
  }
  minimum(o: TensorLike): Tensor {
    return this.binary("min", o);
  }
  and(o: Tensor): Tensor {
    return this.binary("and", o);
  }
  or(o: Tensor): Tensor {
    return this.binary("or", o);
  }
  eq(o: TensorLike): Tensor {
    return this.binary("eq", o);
  }
  ne(o: TensorLike): Tensor {
    return this.binary("ne", o);
  }
  lt(o: TensorLike): Tensor {
    return this.binary("lt", o);
  }
  le(o: TensorLike): Tensor {
    return this.binary("le", o);
  }
  gt(o: TensorLike): Tensor {
    return this.binary("gt", o);
  }
  ge(o: TensorLike): Tensor {
    return this.binary("ge", o);
  }

  neg(): Tensor {
    return this.unary("neg");
  }
  abs(): Tensor {
    return this.unary("abs");
  }
  exp(): Tensor {
    return this.unary("exp");
  }
  log(): Tensor {
    return this.unary("log");
  }
  tanh(): Tensor {
    return this.unary("tanh");
  }
  erf(): Tensor {
    return this.unary("erf");
  }
  sqrt(): Tensor {
    return this.unary("sqrt");
  }
  rsqrt(): Tensor {
    return this.unary("rsqrt");
  }
  reciprocal(): Tensor {
    return this.unary("reciprocal");
  }
  not(): Tensor {
    return this.unary("not");
  }
  square(): Tensor {
    return this.mul(this);
  }
  /** Identity whose gradient is zero. */
  stopGradient(): Tensor {
    return this.unary("stop_gradient");
  }
  cast(to: DType): Tensor {
    return to === this.dtype ? this : this.builder.node("cast", [this], { to });
  }

  // ---- reductions ----------------------------------------------------------------------------
  private axesOf(op: string, axes: number | readonly number[]): number[] {
    const list = (typeof axes === "number" ? [axes] : [...axes]).map((a) => normAxis(op, a, this.rank));
    return [...new Set(list)].sort((a, b) => a - b);
  }
  private reduce(op: string, axes: number | readonly number[], keepDims: boolean): Tensor {
    const ax = this.axesOf(op, axes);
    const r = this.builder.node(op, [this], { axes: ax });
    return keepDims ? r : r.reshape(this.shape.filter((_, i) => !ax.includes(i)));
  }
  sum(axes: number | readonly number[], keepDims = true): Tensor {
    return this.reduce("reduce_sum", axes, keepDims);
  }
  max(axes: number | readonly number[], keepDims = true): Tensor {
    return this.reduce("reduce_max", axes, keepDims);
  }
  mean(axes: number | readonly number[], keepDims = true): Tensor {
    const ax = this.axesOf("reduce_sum", axes);
    const count = ax.reduce((n, a) => n * this.shape[a], 1);
    return this.sum(ax, keepDims).mul(1 / count);
  }

  // ---- movement ------------------------------------------------------------------------------
  /** New shape; one entry may be -1 and is then inferred. */
  reshape(shape: readonly number[]): Tensor {
    const known = numel(shape.filter((d) => d !== -1));
    const total = numel(this.shape);
    const holes = shape.filter((d) => d === -1).length;
    if (holes > 1 || (holes === 1 && (known === 0 || total % known !== 0))) {
      throw new ModelError(
        `reshape: cannot reshape [${this.shape.join(",")}] to [${shape.join(",")}]${locSuffix()}`,
      );
    }
    const full = shape.map((d) => (d === -1 ? total / known : d));
    if (full.length === this.rank && full.every((d, i) => d === this.shape[i])) return this;
    return this.builder.node("reshape", [this], { shape: full });
  }
  broadcastTo(shape: readonly number[]): Tensor {
    if (shape.length === this.rank && shape.every((d, i) => d === this.shape[i])) return this;
    return this.builder.node("broadcast", [this], { shape: [...shape] });
  }
  permute(perm: readonly number[]): Tensor {
    const p = perm.map((a) => normAxis("permute", a, this.rank));
    if (p.every((a, i) => a === i)) return this;
    return this.builder.node("permute", [this], { perm: p });
  }
  /** Swaps two axes. */
  transpose(a = -2, b = -1): Tensor {
    const perm = [...this.shape.keys()];
    const i = normAxis("transpose", a, this.rank), j = normAxis("transpose", b, this.rank);
    [perm[i], perm[j]] = [perm[j], perm[i]];
    return this.permute(perm);
  }
  /** `x[start:end]` along one axis. */
  slice(axis: number, start: number, end: number): Tensor {
    const ax = normAxis("slice", axis, this.rank);
    const s = this.shape.map(() => 0), e = [...this.shape];
    s[ax] = start;
    e[ax] = end;
    return this.builder.node("slice", [this], { start: s, end: e });
  }
  pad(low: readonly number[], high: readonly number[]): Tensor {
    return this.builder.node("pad", [this], { low: [...low], high: [...high] });
  }

  // ---- library ops ---------------------------------------------------------------------------
  /** op(this) @ op(other) over the last two axes, with equal leading axes. */
  matmul(other: Tensor, opts: { transposeA?: boolean; transposeB?: boolean } = {}): Tensor {
    return this.builder.node("matmul", [this, other], {
      transpose_a: opts.transposeA ?? false,
      transpose_b: opts.transposeB ?? false,
    });
  }
  /** Rows of this table [V, ...rest] picked by integer indices [...I]: result [...I, ...rest]. */
  gather(indices: Tensor): Tensor {
    return this.builder.node("gather", [this, indices]);
  }
}
