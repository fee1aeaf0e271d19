/**
 * Constant folding of splats, with the reference interpreter's semantics: each fold is computed in both
 * interpreter precisions ("f64" and "f32") and kept only when one stored value reproduces both
 * (`fround(r64) === r32`); folds that depend on the precision (0.1 * 3 in f32) are left to the device.
 * Integer, bool, f16 and bf16 folds always agree (DESIGN.md, notes: compiler/passes/const_fold.ts).
 */
import { type DType, type Node, numel, type OpName, type TensorType } from "../../ir/mod.ts";
import type { Attrs } from "../../ir/ops.ts";
import { roundBF16, roundF16 } from "../../numeric/half.ts";
import { castValue, runOp } from "../../numeric/reference_ops.ts";

export type FoldPrecision = "f64" | "f32";
const PRECISIONS: readonly FoldPrecision[] = ["f64", "f32"];

/** x as a node of `dtype` holds it in the reference interpreter (interpreter.ts roundInPlace). */
export function roundTo(x: number, dtype: DType, precision: FoldPrecision): number {
  switch (dtype) {
    case "f32":
      return precision === "f32" ? Math.fround(x) : x;
    case "f16":
      return roundF16(x);
    case "bf16":
      return roundBF16(x);
    default:
      return castValue(x, dtype);
  }
}

/** The value every element of a const node holds in the given precision. */
export function constValueIn(n: Node, precision: FoldPrecision): number {
  return roundTo(n.attrs.value as number, n.type.dtype, precision);
}

/**
 * The value of a const node when it is the same in both precisions (always, except f32 values that are
 * not f32-representable, such as 0.1), or undefined. Rules that match on a constant's value use this,
 * so a rule never depends on which precision the graph is later run in.
 */
export function exactConstValue(n: Node): number | undefined {
  const v = constValueIn(n, "f64");
  return Object.is(v, constValueIn(n, "f32")) ? v : undefined;
}

/** The stored value that yields r64 in f64 and r32 in f32 for a node of dtype, if there is one. */
function agree(r64: number, r32: number, dtype: DType): number | undefined {
  return Object.is(roundTo(r64, dtype, "f32"), r32) ? r64 : undefined;
}

// Folding a sum by repeating the interpreter's additions is exact but linear in the count; beyond this
// the fold is skipped (no real graph reduces a constant over millions of elements).
const MAX_REPEATED_ADDS = 1 << 22;

/** Sum of `count` copies of v added one by one in f64 from 0, as the reference's reductions do. */
function repeatedSum(v: number, count: number): number {
  let acc = 0;
  for (let i = 0; i < count; i++) acc += v;
  return acc;
}

/** One element of an elementwise op applied to scalar operands, by the reference kernel itself. */
function elementwise(
  op: OpName,
  attrs: Attrs,
  type: TensorType,
  ins: number[],
  inTypes: TensorType[],
): number {
  const node: Node = { id: -1, op, inputs: [], type, attrs };
  return runOp(op, { node, ins: ins.map((v) => Float64Array.of(v)), inTypes })[0];
}

/**
 * The value of an elementwise node whose operands are all const splats, or undefined when the result
 * would depend on the interpreter's precision.
 */
export function foldElementwise(
  op: OpName,
  attrs: Attrs,
  type: TensorType,
  operands: readonly Node[],
): number | undefined {
  const inTypes = operands.map((o) => o.type);
  const [r64, r32] = PRECISIONS.map((p) =>
    roundTo(elementwise(op, attrs, type, operands.map((o) => constValueIn(o, p)), inTypes), type.dtype, p)
  );
  return agree(r64, r32, type.dtype);
}

/** The value of a reduction of a const splat `x` over `axes`, or undefined. */
export function foldReduce(
  op: "reduce_sum" | "reduce_max",
  axes: readonly number[],
  x: Node,
): number | undefined {
  const count = numel(axes.map((a) => x.type.shape[a]));
  const [r64, r32] = PRECISIONS.map((p) => {
    const v = constValueIn(x, p);
    let r: number;
    if (op === "reduce_max") r = count === 0 ? -Infinity : v; // max of equal values, NaN included
    else if (count > MAX_REPEATED_ADDS) return undefined;
    else r = repeatedSum(v, count);
    return roundTo(r, x.type.dtype, p);
  });
  return r64 === undefined || r32 === undefined ? undefined : agree(r64, r32, x.type.dtype);
}

/** The value of op(a) @ op(b) for const splats: k products accumulated in f64 from 0, then rounded. */
export function foldMatmul(a: Node, b: Node, k: number): number | undefined {
  if (k > MAX_REPEATED_ADDS) return undefined;
  const [r64, r32] = PRECISIONS.map((p) =>
    roundTo(repeatedSum(constValueIn(a, p) * constValueIn(b, p), k), a.type.dtype, p)
  );
  return agree(r64, r32, a.type.dtype);
}
