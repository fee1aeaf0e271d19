/**
 * The simplifier's rewrite rules, as data: one row per rule with the ops it looks at, a rewrite that
 * returns the replacement node (or undefined when it does not apply) and a one-line reason why the
 * rewrite is exact: for every input, in both interpreter precisions, IEEE signed zeros, infinities and NaN
 * included; no rule relies on a tolerance. Rules see operands already simplified, so one sweep reaches the
 * fixed point (DESIGN.md, notes: compiler/passes/simplify_rules.ts).
 */
import {
  type DType,
  isElementwise,
  isFloat,
  isInt,
  type Node,
  type NodeId,
  OP_NAMES,
  type OpName,
  sameShape,
  type TensorType,
} from "../../ir/mod.ts";
import type { Attrs } from "../../ir/ops.ts";
import { exactConstValue, foldElementwise, foldMatmul, foldReduce, roundTo } from "./const_fold.ts";

/** The node a rule is asked about: not yet in the graph, its operands already simplified. */
export interface Site {
  readonly op: OpName;
  readonly inputs: readonly NodeId[];
  readonly attrs: Attrs;
  readonly type: TensorType;
}

/** What a rule may do: look at nodes already built, and build new ones (which are simplified in turn). */
export interface Rewriter {
  node(id: NodeId): Node;
  emit(op: OpName, inputs: readonly NodeId[], attrs?: Attrs): NodeId;
  constant(value: number, type: TensorType): NodeId;
}

export interface Rule {
  readonly name: string;
  readonly ops: readonly OpName[];
  /** Why the rewrite is exact. */
  readonly why: string;
  readonly rewrite: (s: Site, r: Rewriter) => NodeId | undefined;
}

// ---- helpers ------------------------------------------------------------------------------------

const ELEMENTWISE_OPS: readonly OpName[] = OP_NAMES.filter(isElementwise);

const isConst = (r: Rewriter, id: NodeId) => r.node(id).op === "const";

/** A constant's value when it does not depend on the interpreter's precision, else undefined. */
function value(r: Rewriter, id: NodeId): number | undefined {
  const n = r.node(id);
  return n.op === "const" ? exactConstValue(n) : undefined;
}

const is = (r: Rewriter, id: NodeId, v: number) => {
  const x = value(r, id);
  return x !== undefined && Object.is(x, v);
};

/** Two operands that hold the same values: the same node, or two equal constants of one type. */
function sameValues(r: Rewriter, a: NodeId, b: NodeId): boolean {
  if (a === b) return true;
  const na = r.node(a), nb = r.node(b);
  return na.op === "const" && nb.op === "const" && na.type.dtype === nb.type.dtype &&
    Object.is(na.attrs.value, nb.attrs.value);
}

/** The operand with op `op`, or undefined. */
function producer(r: Rewriter, id: NodeId, op: OpName): Node | undefined {
  const n = r.node(id);
  return n.op === op ? n : undefined;
}

/** A parameter or input, or a reshape of one: a value whose buffer an in-place concat can share. */
function isSourceView(r: Rewriter, id: NodeId): boolean {
  const n = r.node(id);
  if (n.op === "param" || n.op === "input") return true;
  return n.op === "reshape" && isSourceView(r, n.inputs[0]);
}

/** True when every value of dtype `from` is exactly representable in `to` (the cast loses nothing). */
function lossless(from: DType, to: DType): boolean {
  return from === to || from === "bool" || (to === "f32" && (from === "f16" || from === "bf16"));
}

/** ±2^k whose reciprocal is also exactly a value of `dtype` (so x / c and x * (1/c) round alike). */
function exactReciprocal(c: number, dtype: DType): number | undefined {
  if (!Number.isFinite(c) || c === 0) return undefined;
  const m = Math.abs(c);
  if (m !== 2 ** Math.round(Math.log2(m))) return undefined;
  const inv = 1 / c;
  return Object.is(roundTo(inv, dtype, "f32"), inv) && Object.is(roundTo(inv, dtype, "f64"), inv)
    ? inv
    : undefined;
}

/** Swaps the last two axes and nothing else. */
function isLastTwoSwap(perm: readonly number[]): boolean {
  const r = perm.length;
  return r >= 2 && perm[r - 2] === r - 1 && perm[r - 1] === r - 2 &&
    perm.slice(0, r - 2).every((p, i) => p === i);
}

/** For commutative ops: tries the rule on (a, b), then on (b, a). */
function eitherOrder(
  f: (x: NodeId, c: NodeId, s: Site, r: Rewriter) => NodeId | undefined,
): (s: Site, r: Rewriter) => NodeId | undefined {
  return (s, r) => f(s.inputs[0], s.inputs[1], s, r) ?? f(s.inputs[1], s.inputs[0], s, r);
}

// ---- the table ----------------------------------------------------------------------------------

export const RULES: readonly Rule[] = [
  // ---- constant folding --------------------------------------------------------------------------
  {
    name: "fold_elementwise",
    ops: ELEMENTWISE_OPS,
    why: "a pointwise op on splats is a splat of the op on their values; kept only if both precisions agree",
    rewrite: (s, r) => {
      if (!s.inputs.every((i) => isConst(r, i))) return undefined;
      const v = foldElementwise(s.op, s.attrs, s.type, s.inputs.map((i) => r.node(i)));
      return v === undefined ? undefined : r.constant(v, s.type);
    },
  },
  {
    name: "fold_movement",
    ops: ["reshape", "broadcast", "permute", "slice", "concat", "pad"],
    why: "moving elements of a splat gives a splat of the same value (pad only for +0, which it inserts)",
    rewrite: (s, r) => {
      const [first, ...rest] = s.inputs.map((i) => r.node(i));
      if (first.op !== "const" || !rest.every((n) => sameValues(r, first.id, n.id))) return undefined;
      if (s.op === "pad" && !is(r, first.id, 0)) return undefined;
      return r.constant(first.attrs.value as number, s.type);
    },
  },
  {
    name: "fold_reduce",
    ops: ["reduce_sum", "reduce_max"],
    why: "reducing a splat repeats the interpreter's f64 additions (or max) on its value",
    rewrite: (s, r) => {
      const x = r.node(s.inputs[0]);
      if (x.op !== "const") return undefined;
      const v = foldReduce(s.op as "reduce_sum" | "reduce_max", s.attrs.axes as number[], x);
      return v === undefined ? undefined : r.constant(v, s.type);
    },
  },
  {
    name: "fold_matmul",
    ops: ["matmul"],
    why: "each element of a product of splats is k equal products accumulated in f64 from 0",
    rewrite: (s, r) => {
      const [a, b] = s.inputs.map((i) => r.node(i));
      if (a.op !== "const" || b.op !== "const") return undefined;
      const rank = a.type.shape.length;
      const k = a.type.shape[s.attrs.transpose_a ? rank - 2 : rank - 1];
      const v = foldMatmul(a, b, k);
      return v === undefined ? undefined : r.constant(v, s.type);
    },
  },
  {
    name: "iota_unit_axis",
    ops: ["iota"],
    why: "the index along an axis of size 1 is always 0",
    rewrite: (s, r) => (s.type.shape[s.attrs.axis as number] === 1 ? r.constant(0, s.type) : undefined),
  },

  // ---- arithmetic identities ---------------------------------------------------------------------
  {
    name: "mul_one",
    ops: ["mul"],
    why: "x * 1 = x exactly for every x (signed zeros, infinities, NaN; integers)",
    rewrite: eitherOrder((x, c, _s, r) => (is(r, c, 1) ? x : undefined)),
  },
  {
    name: "mul_minus_one",
    ops: ["mul"],
    why: "x * -1 = -x exactly in IEEE arithmetic (only floats: u32 products are not exact in f64)",
    rewrite: eitherOrder((
      x,
      c,
      s,
      r,
    ) => (isFloat(s.type.dtype) && is(r, c, -1) ? r.emit("neg", [x]) : undefined)),
  },
  {
    name: "div_one",
    ops: ["div"],
    why: "x / 1 = x exactly (floats, and integer division truncating x / 1)",
    rewrite: (s, r) => (is(r, s.inputs[1], 1) ? s.inputs[0] : undefined),
  },
  {
    name: "div_pow2",
    ops: ["div"],
    why: "x / 2^k and x * 2^-k are the same real number rounded once, when 2^-k is exact in the dtype",
    rewrite: (s, r) => {
      if (!isFloat(s.type.dtype)) return undefined;
      const c = value(r, s.inputs[1]);
      const inv = c === undefined ? undefined : exactReciprocal(c, s.type.dtype);
      return inv === undefined ? undefined : r.emit("mul", [s.inputs[0], r.constant(inv, s.type)]);
    },
  },
  {
    name: "one_div",
    ops: ["div"],
    why: "1 / x is what reciprocal computes (the reference defines reciprocal as 1 / x)",
    rewrite: (s, r) =>
      isFloat(s.type.dtype) && is(r, s.inputs[0], 1) ? r.emit("reciprocal", [s.inputs[1]]) : undefined,
  },
  {
    name: "add_zero",
    ops: ["add"],
    why:
      "x + (-0) = x for every float x (but -0 + +0 = +0, so +0 is not an identity); for integers x + 0 = x",
    rewrite: eitherOrder((x, c, s, r) => (is(r, c, isInt(s.type.dtype) ? 0 : -0) ? x : undefined)),
  },
  {
    name: "sub_zero",
    ops: ["sub"],
    why: "x - (+0) = x + (-0) = x for every float x; for integers x - 0 = x",
    rewrite: (s, r) => (is(r, s.inputs[1], 0) ? s.inputs[0] : undefined),
  },
  {
    name: "zero_sub",
    ops: ["sub"],
    why: "(-0) - x = -x for every float x (+0 - +0 is +0, not -0, so only -0 works); 0 - x = -x for integers",
    rewrite: (s, r) =>
      is(r, s.inputs[0], isInt(s.type.dtype) ? 0 : -0) ? r.emit("neg", [s.inputs[1]]) : undefined,
  },
  {
    name: "add_neg",
    ops: ["add"],
    why: "x + (-y) = x - y: IEEE subtraction is addition of the negation, and addition commutes",
    rewrite: eitherOrder((x, ny, _s, r) => {
      const n = producer(r, ny, "neg");
      return n ? r.emit("sub", [x, n.inputs[0]]) : undefined;
    }),
  },
  {
    name: "sub_neg",
    ops: ["sub"],
    why: "x - (-y) = x + y exactly",
    rewrite: (s, r) => {
      const n = producer(r, s.inputs[1], "neg");
      return n ? r.emit("add", [s.inputs[0], n.inputs[0]]) : undefined;
    },
  },
  {
    name: "neg_neg",
    ops: ["neg"],
    why: "negation is an involution (floats flip the sign bit; integers negate modulo 2^32)",
    rewrite: (s, r) => producer(r, s.inputs[0], "neg")?.inputs[0],
  },
  {
    name: "mul_neg_neg",
    ops: ["mul"],
    why: "(-x) * (-y) = x * y: the sign of an IEEE product is the xor of the signs",
    rewrite: (s, r) => {
      const a = producer(r, s.inputs[0], "neg"), b = producer(r, s.inputs[1], "neg");
      return a && b && isFloat(s.type.dtype) ? r.emit("mul", [a.inputs[0], b.inputs[0]]) : undefined;
    },
  },
  {
    name: "abs_of_sign",
    ops: ["abs"],
    why:
      "||x|| = |x|, and |-x| = |x| for floats and i32 (both wrap -2^31 to itself); not u32, where -x wraps",
    rewrite: (s, r) => {
      const n = r.node(s.inputs[0]);
      if (n.op === "abs") return n.id;
      return n.op === "neg" && s.type.dtype !== "u32" ? r.emit("abs", [n.inputs[0]]) : undefined;
    },
  },
  {
    name: "idempotent_binary",
    ops: ["max", "min", "and", "or"],
    why: "max(x, x) = min(x, x) = x (NaN stays NaN), and likewise for and/or",
    rewrite: (s, r) => (sameValues(r, s.inputs[0], s.inputs[1]) ? s.inputs[0] : undefined),
  },
  {
    name: "logic_const",
    ops: ["and", "or"],
    why: "x and true = x, x and false = false, x or false = x, x or true = true",
    rewrite: eitherOrder((x, c, s, r) => {
      const v = value(r, c);
      if (v === undefined) return undefined;
      const absorbing = s.op === "and" ? 0 : 1;
      return v === absorbing ? c : x;
    }),
  },
  {
    name: "compare_same",
    ops: ["eq", "ne", "lt", "le", "gt", "ge"],
    why: "an integer or bool compared with itself has a fixed answer (not floats: NaN == NaN is false)",
    rewrite: (s, r) => {
      const x = r.node(s.inputs[0]);
      if (s.inputs[0] !== s.inputs[1] || isFloat(x.type.dtype)) return undefined;
      return r.constant(s.op === "eq" || s.op === "le" || s.op === "ge" ? 1 : 0, s.type);
    },
  },
  {
    name: "not_not",
    ops: ["not"],
    why: "not(not(c)) = c for bool values 0 and 1",
    rewrite: (s, r) => producer(r, s.inputs[0], "not")?.inputs[0],
  },

  // ---- casts and identities ----------------------------------------------------------------------
  {
    name: "cast_same",
    ops: ["cast"],
    why: "a cast to the operand's own dtype rounds a value that is already of that dtype",
    rewrite: (s, r) => (r.node(s.inputs[0]).type.dtype === s.type.dtype ? s.inputs[0] : undefined),
  },
  {
    name: "cast_cast",
    ops: ["cast"],
    why:
      "cast(cast(x, A), B) = cast(x, B) when every value of x's dtype is exact in A (f16/bf16 -> f32, bool)",
    rewrite: (s, r) => {
      const inner = producer(r, s.inputs[0], "cast");
      if (!inner) return undefined;
      const x = r.node(inner.inputs[0]);
      return lossless(x.type.dtype, inner.type.dtype)
        ? r.emit("cast", [x.id], { to: s.type.dtype })
        : undefined;
    },
  },
  {
    name: "stop_gradient_twice",
    ops: ["stop_gradient"],
    why: "stop_gradient is an identity whose derivative is zero; applying it twice changes neither",
    rewrite: (s, r) => (producer(r, s.inputs[0], "stop_gradient") ? s.inputs[0] : undefined),
  },

  // ---- select ------------------------------------------------------------------------------------
  {
    name: "where_same",
    ops: ["where"],
    why: "where(c, x, x) = x whatever c is",
    rewrite: (s, r) => (sameValues(r, s.inputs[1], s.inputs[2]) ? s.inputs[1] : undefined),
  },
  {
    name: "where_const",
    ops: ["where"],
    why: "a splat condition picks the same branch everywhere",
    rewrite: (s, r) => {
      const c = value(r, s.inputs[0]);
      return c === undefined ? undefined : c ? s.inputs[1] : s.inputs[2];
    },
  },
  {
    name: "where_not",
    ops: ["where"],
    why: "where(not c, a, b) = where(c, b, a)",
    rewrite: (s, r) => {
      const n = producer(r, s.inputs[0], "not");
      return n ? r.emit("where", [n.inputs[0], s.inputs[2], s.inputs[1]]) : undefined;
    },
  },

  // ---- movement ----------------------------------------------------------------------------------
  {
    name: "movement_identity",
    ops: ["reshape", "broadcast", "permute", "slice", "pad", "concat"],
    why: "a reshape/broadcast to the same shape, the identity permutation, a full slice, zero padding or a " +
      "one-operand concat copies x unchanged",
    rewrite: (s, r) => {
      const x = r.node(s.inputs[0]);
      switch (s.op) {
        case "reshape":
        case "broadcast":
          return sameShape(x.type.shape, s.type.shape) ? x.id : undefined;
        case "permute":
          return (s.attrs.perm as number[]).every((p, i) => p === i) ? x.id : undefined;
        case "slice":
          return sameShape(x.type.shape, s.type.shape) ? x.id : undefined;
        case "pad":
          return sameShape(x.type.shape, s.type.shape) ? x.id : undefined;
        case "concat":
          // Except a flat vector of one parameter (an optimizer group of one tensor): in-place concat
          // makes its buffer the parameter's (fusion/in_place.ts), which the trainer writes through.
          if (s.inputs.length !== 1) return undefined;
          return s.type.shape.length === 1 && isSourceView(r, x.id) ? undefined : x.id;
      }
      return undefined;
    },
  },
  {
    name: "reshape_reshape",
    ops: ["reshape"],
    why: "reshapes keep row-major order, so two in a row are one",
    rewrite: (s, r) => {
      const inner = producer(r, s.inputs[0], "reshape");
      return inner ? r.emit("reshape", [inner.inputs[0]], s.attrs) : undefined;
    },
  },
  {
    name: "permute_permute",
    ops: ["permute"],
    why: "permute(permute(x, p), q) = permute(x, i -> p[q[i]])",
    rewrite: (s, r) => {
      const inner = producer(r, s.inputs[0], "permute");
      if (!inner) return undefined;
      const p = inner.attrs.perm as number[], q = s.attrs.perm as number[];
      return r.emit("permute", [inner.inputs[0]], { perm: q.map((i) => p[i]) });
    },
  },
  {
    name: "broadcast_broadcast",
    ops: ["broadcast"],
    why: "numpy broadcasting composes: every element still comes from the same element of x",
    rewrite: (s, r) => {
      const inner = producer(r, s.inputs[0], "broadcast");
      return inner ? r.emit("broadcast", [inner.inputs[0]], s.attrs) : undefined;
    },
  },
  {
    name: "slice_slice",
    ops: ["slice"],
    why: "x[a:b][c:d] = x[a+c : a+d] on every axis",
    rewrite: (s, r) => {
      const inner = producer(r, s.inputs[0], "slice");
      if (!inner) return undefined;
      const a = inner.attrs.start as number[], c = s.attrs.start as number[], d = s.attrs.end as number[];
      return r.emit("slice", [inner.inputs[0]], {
        start: a.map((v, i) => v + c[i]),
        end: a.map((v, i) => v + d[i]),
      });
    },
  },
  {
    name: "matmul_absorb_transpose",
    ops: ["matmul"],
    why: "a permute that swaps the last two axes of a matmul operand is its transpose flag; the same " +
      "products are summed in the same order",
    rewrite: (s, r) => {
      // The operand to read instead (the permute's input) when it is a last-two-axes swap.
      const untransposed = (id: NodeId): NodeId | undefined => {
        const p = producer(r, id, "permute");
        return p && isLastTwoSwap(p.attrs.perm as number[]) ? p.inputs[0] : undefined;
      };
      const a = untransposed(s.inputs[0]), b = untransposed(s.inputs[1]);
      if (a === undefined && b === undefined) return undefined;
      return r.emit("matmul", [a ?? s.inputs[0], b ?? s.inputs[1]], {
        transpose_a: (s.attrs.transpose_a as boolean) !== (a !== undefined),
        transpose_b: (s.attrs.transpose_b as boolean) !== (b !== undefined),
      });
    },
  },

  // ---- reductions --------------------------------------------------------------------------------
  {
    name: "reduce_unit_axes",
    ops: ["reduce_sum", "reduce_max"],
    why: "a reduced axis of size 1 adds nothing to the order of combination; max over only such axes is x " +
      "(max(-inf, x) = x), a sum keeps one (0 + -0 is +0)",
    rewrite: (s, r) => {
      const x = r.node(s.inputs[0]);
      const axes = s.attrs.axes as number[];
      const kept = axes.filter((a) => x.type.shape[a] !== 1);
      if (kept.length === axes.length) return undefined;
      if (kept.length > 0) return r.emit(s.op, [x.id], { axes: kept });
      if (s.op === "reduce_max") return x.id;
      return axes.length > 1 ? r.emit(s.op, [x.id], { axes: [axes[0]] }) : undefined;
    },
  },
];
