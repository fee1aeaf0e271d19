/**
 * The vector-Jacobian product of every primitive op, as one table keyed by op name. The mapped type
 * makes a missing op a type error, so adding a row to ir/ops.ts forces a decision here. A rule gets the
 * forward node (so derivatives reuse forward values), its cotangent and which operands want one, and returns
 * each operand's cotangent id or undefined; rules emit only forward ops, so fusion and codegen need no
 * backward-only kernels (DESIGN.md, notes: compiler/training_graph/vjp.ts).
 */
import { IRError, isFloat, type Node, type NodeId } from "../../ir/mod.ts";
import type { OpName } from "../../ir/ops.ts";
import type { GraphEditor } from "../graph/edit.ts";

export type VjpRule = (
  b: GraphEditor,
  n: Node,
  g: NodeId,
  want: readonly boolean[],
) => (NodeId | undefined)[];

const TWO_OVER_SQRT_PI = 2 / Math.sqrt(Math.PI);

/** Zeros of the cotangent's type, for the unselected side of a `where`. */
const zerosOf = (b: GraphEditor, g: NodeId) => b.constLike(0, b.type(g));

/** The axes of `x` (rank r) that numpy broadcasting to `out` expands: inserted ones and size-1 ones. */
function expandedAxes(x: readonly number[], out: readonly number[]): number[] {
  const off = out.length - x.length;
  const axes: number[] = [];
  for (let i = 0; i < out.length; i++) {
    if (i < off || (x[i - off] === 1 && out[i] !== 1)) axes.push(i);
  }
  return axes;
}

/** The cotangent routed to the operand a comparison selected, zeros elsewhere. */
function selectBy(b: GraphEditor, mask: NodeId, g: NodeId, want: readonly boolean[]): (NodeId | undefined)[] {
  const z = zerosOf(b, g);
  return [want[0] ? b.where(mask, g, z) : undefined, want[1] ? b.where(mask, z, g) : undefined];
}

export const VJP: { readonly [K in OpName]: VjpRule | null } = {
  // Sources have no operands.
  input: null,
  param: null,
  const: null,
  iota: null,

  // d(-x) = -g
  neg: (b, _n, g) => [b.neg(g)],
  // d|x| = g * sign(x), the sign chosen with where (x = 0 takes +g)
  abs: (b, n, g) => [b.where(b.lt(n.inputs[0], zerosOf(b, g)), b.neg(g), g)],
  // d e^x = g * y
  exp: (b, n, g) => [b.mul(g, n.id)],
  // d log x = g / x
  log: (b, n, g) => [b.div(g, n.inputs[0])],
  // d tanh x = g * (1 - y²)
  tanh: (b, n, g) => [b.mul(g, b.sub(b.constLike(1, n.type), b.mul(n.id, n.id)))],
  // d erf x = g * 2/sqrt(pi) * e^(-x²)
  erf: (b, n, g) => {
    const x = n.inputs[0];
    return [b.mul(g, b.scale(b.exp(b.neg(b.mul(x, x))), TWO_OVER_SQRT_PI))];
  },
  // d sqrt x = g * 0.5 / y
  sqrt: (b, n, g) => [b.div(b.scale(g, 0.5), n.id)],
  // d x^(-1/2) = g * -0.5 * y / x
  rsqrt: (b, n, g) => [b.mul(b.scale(g, -0.5), b.div(n.id, n.inputs[0]))],
  // d (1/x) = -g * y²
  reciprocal: (b, n, g) => [b.neg(b.mul(g, b.mul(n.id, n.id)))],
  // no gradient: treated as a constant by definition
  stop_gradient: null,
  // no gradient: bool
  not: null,
  // float->float: cast g back to the operand's dtype; to or from an integer type: no gradient
  cast: (b, n, g) => {
    const from = b.type(n.inputs[0]).dtype;
    return [isFloat(from) && isFloat(n.type.dtype) ? b.cast(g, from) : undefined];
  },

  // d(a+b) = (g, g)
  add: (_b, _n, g) => [g, g],
  // d(a-b) = (g, -g)
  sub: (b, _n, g, want) => [g, want[1] ? b.neg(g) : undefined],
  // d(a*b) = (g*b, g*a)
  mul: (b, n, g, want) => {
    const [x, y] = n.inputs;
    return [want[0] ? b.mul(g, y) : undefined, want[1] ? b.mul(g, x) : undefined];
  },
  // d(a/b) = (g/b, -g*a/b² = -(g/b)*y)
  div: (b, n, g, want) => {
    const gOverB = b.div(g, n.inputs[1]);
    return [want[0] ? gOverB : undefined, want[1] ? b.neg(b.mul(gOverB, n.id)) : undefined];
  },
  // d max(a,b) = g to the selected operand: a where a >= b (ties go to the first), else b
  max: (b, n, g, want) => selectBy(b, b.ge(n.inputs[0], n.inputs[1]), g, want),
  // d min(a,b) = g to the selected operand: a where a <= b (ties go to the first), else b
  min: (b, n, g, want) => selectBy(b, b.le(n.inputs[0], n.inputs[1]), g, want),
  // no gradient: bool
  and: null,
  // no gradient: bool
  or: null,
  // no gradient: comparisons are piecewise constant
  eq: null,
  // no gradient: comparisons are piecewise constant
  ne: null,
  // no gradient: comparisons are piecewise constant
  lt: null,
  // no gradient: comparisons are piecewise constant
  le: null,
  // no gradient: comparisons are piecewise constant
  gt: null,
  // no gradient: comparisons are piecewise constant
  ge: null,
  // d where(c,a,b) = (none, where(c,g,0), where(c,0,g))
  where: (b, n, g, want) => [undefined, ...selectBy(b, n.inputs[0], g, [want[1], want[2]])],

  // d sum_axes(x) = g broadcast back over the reduced (size-1) axes
  reduce_sum: (b, n, g) => [b.broadcast(g, b.shape(n.inputs[0]))],
  // d max_axes(x) = g shared equally among the positions equal to the max (one position unless ties)
  reduce_max: (b, n, g) => {
    const x = n.inputs[0];
    const xs = b.shape(x);
    const isMax = b.eq(x, b.broadcast(n.id, xs));
    const count = b.reduceSum(b.cast(isMax, n.type.dtype), n.attrs.axes as number[]);
    const share = b.broadcast(b.div(g, count), xs);
    return [b.where(isMax, share, b.constLike(0, b.type(x)))];
  },

  // d reshape(x) = g reshaped back
  reshape: (b, n, g) => [b.reshape(g, b.shape(n.inputs[0]))],
  // d broadcast(x) = g summed over the expanded axes, then reshaped to x (dropping inserted axes)
  broadcast: (b, n, g) => {
    const xs = b.shape(n.inputs[0]);
    const axes = expandedAxes(xs, n.type.shape);
    return [b.reshape(axes.length ? b.reduceSum(g, axes) : g, xs)];
  },
  // d permute(x, p) = permute(g, p⁻¹)
  permute: (b, n, g) => {
    const perm = n.attrs.perm as number[];
    const inv = new Array<number>(perm.length);
    perm.forEach((p, i) => (inv[p] = i));
    return [b.permute(g, inv)];
  },
  // d slice(x) = g zero-padded back to x's shape (pad is slice's adjoint)
  slice: (b, n, g) => {
    const start = n.attrs.start as number[];
    const end = n.attrs.end as number[];
    const xs = b.shape(n.inputs[0]);
    return [b.pad(g, start, xs.map((d, i) => d - end[i]))];
  },
  // d pad(x) = the slice of g where x sits (slice is pad's adjoint)
  pad: (b, n, g) => {
    const low = n.attrs.low as number[];
    const xs = b.shape(n.inputs[0]);
    return [b.slice(g, low, low.map((l, i) => l + xs[i]))];
  },
  // d concat(x0..xk) = the slices of g along axis that each part came from
  concat: (b, n, g, want) => {
    const axis = n.attrs.axis as number;
    const shape = n.type.shape;
    let at = 0;
    return n.inputs.map((x, i) => {
      const len = b.shape(x)[axis];
      const start = shape.map((_, j) => (j === axis ? at : 0));
      const end = shape.map((d, j) => (j === axis ? at + len : d));
      at += len;
      return want[i] ? b.slice(g, start, end) : undefined;
    });
  },

  // C = op(A) op(B): dA = G op(B)ᵀ and dB = op(A)ᵀ G, each written with transpose flags, not permutes
  matmul: (b, n, g, want) => {
    const [x, y] = n.inputs;
    const ta = n.attrs.transpose_a as boolean;
    const tb = n.attrs.transpose_b as boolean;
    // dA: A B -> G Bᵀ; A Bᵀ -> G B; Aᵀ B -> B Gᵀ; Aᵀ Bᵀ -> Bᵀ Gᵀ
    const da = () => ta ? b.matmul(y, g, tb, true) : b.matmul(g, y, false, !tb);
    // dB: A B -> Aᵀ G; A Bᵀ -> Gᵀ A; Aᵀ B -> A G; Aᵀ Bᵀ -> Gᵀ Aᵀ
    const db = () => tb ? b.matmul(g, x, true, ta) : b.matmul(x, g, !ta, false);
    return [want[0] ? da() : undefined, want[1] ? db() : undefined];
  },
  // d gather(T, idx) = (scatter_add(idx, g, rows(T)), none): repeated indices accumulate
  gather: (b, n, g) => [b.scatterAdd(n.inputs[1], g, b.shape(n.inputs[0])[0]), undefined],
  // d scatter_add(idx, U) = (none, gather(g, idx))
  scatter_add: (b, n, g) => [undefined, b.gather(g, n.inputs[0])],
  // no gradient: random numbers do not depend on anything differentiable
  random_uniform: null,
  // d attention = attention_grad for each wanted q, k, v (decomposed in compiler/passes/decompose.ts as the
  // VJP of attention's primitives); an additive mask that needs a gradient is refused
  attention: (b, n, g, want) => {
    if (want[3]) throw new IRError("attention: the mask takes no gradient");
    const [q, k, v, mask, ...key] = n.inputs, wanted = [0, 1, 2].filter((i) => want[i]);
    return [0, 1, 2].map((wrt) =>
      want[wrt]
        ? b.node("attention_grad", [q, k, v, mask, g, ...key], { ...n.attrs, wrt, wanted })
        : undefined
    );
  },
  // not differentiated again: nothing builds second-order steps
  attention_grad: null,
};
