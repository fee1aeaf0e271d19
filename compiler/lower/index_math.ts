/**
 * Index math for the lowering: multi-dimensional indices as kernel-IR expressions, and how each movement
 * op maps an index of its result to an index of its operand.
 */
import { stridesOf } from "../../ir/mod.ts";
import { add, div, i32, type KExpr, mod, mul, sub } from "../kernel_ir/ir.ts";

/** An index into a tensor: one i32 expression per axis, plus the row-major linear index when it is known. */
export interface Idx {
  readonly dims: readonly KExpr[];
  readonly lin?: KExpr;
  /**
   * Set when the linear index is `base + lane` with `base` a multiple of 4 and the same expression for
   * four consecutive elements handled together: their random draws share one Philox block.
   */
  readonly quad?: { readonly base: KExpr; readonly lane: number };
}

export function linearize(idx: Idx, shape: readonly number[]): KExpr {
  if (idx.lin) return idx.lin;
  const strides = stridesOf(shape);
  let acc: KExpr = i32(0);
  for (let d = 0; d < shape.length; d++) {
    if (shape[d] === 1) continue;
    acc = add(acc, mul(idx.dims[d], i32(strides[d])));
  }
  return acc;
}

/** Splits a linear index over `shape` into per-axis indices (the division-free cases are spelled short). */
export function delinearize(lin: KExpr, shape: readonly number[]): Idx {
  const strides = stridesOf(shape);
  const dims = shape.map((n, d) => {
    if (n === 1) return i32(0);
    const q = strides[d] === 1 ? lin : div(lin, i32(strides[d]));
    // The leading non-unit axis needs no modulo: the linear index is in range.
    const leading = shape.slice(0, d).every((m) => m === 1);
    return leading ? q : mod(q, i32(n));
  });
  return { dims, lin };
}

/** The operand index read by `broadcast` (numpy rules: dims aligned right, size-1 dims read at 0). */
export function broadcastOperand(idx: Idx, inShape: readonly number[], outShape: readonly number[]): Idx {
  const off = outShape.length - inShape.length;
  const dims = inShape.map((n, d) => (n === 1 ? i32(0) : idx.dims[d + off]));
  const same = off === 0 && inShape.every((n, d) => n === outShape[d]);
  return same ? idx : { dims };
}

export function reshapeOperand(idx: Idx, inShape: readonly number[], outShape: readonly number[]): Idx {
  const lin = linearize(idx, outShape);
  // A reshape keeps the linear index, so a shared Philox block stays shared.
  return idx.quad ? { ...delinearize(lin, inShape), quad: idx.quad } : delinearize(lin, inShape);
}

/** permute: result axis d is operand axis perm[d]. */
export function permuteOperand(idx: Idx, perm: readonly number[]): Idx {
  const dims: KExpr[] = new Array(perm.length);
  perm.forEach((p, d) => (dims[p] = idx.dims[d]));
  return { dims };
}

export function sliceOperand(idx: Idx, start: readonly number[]): Idx {
  return { dims: idx.dims.map((e, d) => add(e, i32(start[d]))) };
}

/** pad: operand index (clamped into range) and the condition that it really is in range. */
export function padOperand(
  idx: Idx,
  low: readonly number[],
  inShape: readonly number[],
  outShape: readonly number[],
): { idx: Idx; inRange: KExpr | undefined } {
  let inRange: KExpr | undefined;
  const dims = idx.dims.map((e, d) => {
    if (low[d] === 0 && inShape[d] === outShape[d]) return e;
    const x = sub(e, i32(low[d]));
    const ok = andAll(bin2("ge", x, i32(0)), bin2("lt", x, i32(inShape[d])));
    inRange = inRange ? andAll(inRange, ok) : ok;
    return clamp(x, 0, inShape[d] - 1);
  });
  return { idx: { dims }, inRange };
}

export function clamp(e: KExpr, lo: number, hi: number): KExpr {
  if (e.k === "lit") return i32(Math.min(Math.max(e.v, lo), hi));
  return {
    k: "bin",
    t: "i32",
    op: "min",
    a: { k: "bin", t: "i32", op: "max", a: e, b: i32(lo) },
    b: i32(hi),
  };
}

function bin2(op: "ge" | "lt", a: KExpr, b: KExpr): KExpr {
  return { k: "bin", t: "bool", op, a, b };
}

function andAll(a: KExpr, b: KExpr): KExpr {
  return { k: "bin", t: "bool", op: "and", a, b };
}

/** A compact structural key of an expression, for memoizing values per index. */
export function exprKey(e: KExpr): string {
  switch (e.k) {
    case "lit":
      return `${e.v}${e.t[0]}`;
    case "ref":
      return e.name;
    case "id":
      return `#${e.which}`;
    case "load":
      return `${e.buf}[${exprKey(e.index)}]`;
    case "sload":
      return `${e.arr}{${exprKey(e.index)}}`;
    case "un":
      return `${e.op}(${exprKey(e.a)})`;
    case "bin":
      return `(${exprKey(e.a)} ${e.op} ${exprKey(e.b)})`;
    case "select":
      return `sel(${exprKey(e.cond)},${exprKey(e.a)},${exprKey(e.b)})`;
    case "cast":
    case "splat":
      return `${e.t}(${exprKey(e.a)})`;
    case "vec":
      return `${e.t}(${e.parts.map(exprKey).join(",")})`;
    case "lane":
      return `${exprKey(e.a)}.${e.lane}`;
    case "philox":
      return `philox(${exprKey(e.seed)},${exprKey(e.step)},${e.stream},${exprKey(e.index)})`;
  }
}

// Keys are asked for the same index many times (once per value read at it), so remember them.
const keyCache = new WeakMap<Idx, string>();
export function idxKey(idx: Idx): string {
  let k = keyCache.get(idx);
  if (k === undefined) {
    k = idx.dims.map(exprKey).join(",");
    keyCache.set(idx, k);
  }
  return k;
}
