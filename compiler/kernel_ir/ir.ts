/**
 * The kernel IR: one small imperative language that every emitter (WGSL, CUDA C) spells. Everything that
 * decides what runs — index math, loop structure, reduction strategy, workgroup shape, vector width — is
 * decided by the lowering into this IR or by target legalize rules rewriting it; emitters only spell. A
 * kernel runs `workgroups` × `workgroupSize` threads (ids lid, wg, gid) over flat buffers with i32 indices;
 * values are scalars or four-lane vectors. The model: DESIGN.md, notes: compiler/kernel_ir/ir.ts.
 */

import { K_BINARY, type KBinOp, type KUnOp } from "./kernel_ops.ts";
export { K_BINARY, K_UNARY, type KBinOp, type KUnOp } from "./kernel_ops.ts";

/** Element types as stored in buffers. `bool` is legalized to u32 storage by targets without byte types. */
export type KStorage = "f32" | "f16" | "bf16" | "i32" | "u32" | "bool";
/**
 * Four-lane vectors (compiler/lower/vectorize.ts): lane i holds what thread-element i of four consecutive
 * elements would hold in the scalar kernel. Operations on vectors work lane by lane.
 */
export type KVector = "v4f32" | "v4f16" | "v4i32" | "v4u32" | "v4bool";
/** Types of values inside a kernel. */
export type KType = KStorage | KVector;

const VECTOR_OF: Partial<Record<KStorage, KVector>> = {
  f32: "v4f32",
  f16: "v4f16",
  i32: "v4i32",
  u32: "v4u32",
  bool: "v4bool",
};
const LANE_OF: Record<KVector, KStorage> = {
  v4f32: "f32",
  v4f16: "f16",
  v4i32: "i32",
  v4u32: "u32",
  v4bool: "bool",
};

export const isVector = (t: KType): t is KVector => t in LANE_OF;
/** The type of one lane (a scalar type is its own lane type). */
export const laneType = (t: KType): KStorage => (isVector(t) ? LANE_OF[t] : t);
/** Number of lanes: 4 for vectors, 1 for scalars. */
export const lanesOf = (t: KType): number => (isVector(t) ? 4 : 1);
/** The four-lane vector of a scalar type (undefined for bf16, which has no vector type here). */
export function vectorOf(t: KType): KVector | undefined {
  return isVector(t) ? t : VECTOR_OF[t];
}

export type KExpr =
  | { readonly k: "lit"; readonly t: KType; readonly v: number }
  | { readonly k: "ref"; readonly t: KType; readonly name: string }
  | { readonly k: "id"; readonly t: "i32"; readonly which: "lid" | "wg" | "gid" }
  | { readonly k: "load"; readonly t: KType; readonly buf: string; readonly index: KExpr }
  | { readonly k: "sload"; readonly t: KType; readonly arr: string; readonly index: KExpr }
  | { readonly k: "un"; readonly t: KType; readonly op: KUnOp; readonly a: KExpr }
  | { readonly k: "bin"; readonly t: KType; readonly op: KBinOp; readonly a: KExpr; readonly b: KExpr }
  | { readonly k: "select"; readonly t: KType; readonly cond: KExpr; readonly a: KExpr; readonly b: KExpr }
  /** Conversion between scalar types, or lane by lane between vector types (never scalar <-> vector). */
  | { readonly k: "cast"; readonly t: KType; readonly a: KExpr }
  /** A scalar repeated in all four lanes; `a.t` is the lane type of `t`. */
  | { readonly k: "splat"; readonly t: KVector; readonly a: KExpr }
  /** A vector from four scalars of its lane type, lane 0 first. */
  | { readonly k: "vec"; readonly t: KVector; readonly parts: readonly KExpr[] }
  /** Lane `lane` (0-3) of the vector `a`. */
  | { readonly k: "lane"; readonly t: KStorage; readonly a: KExpr; readonly lane: number }
  /**
   * Uniform [0,1) f32 of the project's Philox convention (numeric/philox.ts): key (seed, stream),
   * counter (floor(index/4), 0, step, 0), word index%4, (bits >>> 8) * 2^-24. seed/step are u32 exprs.
   * With t = v4f32, `index` must be a multiple of 4 and the result is elements index..index+3: the four
   * words of one Philox block.
   */
  | {
    readonly k: "philox";
    readonly t: "f32" | "v4f32";
    readonly seed: KExpr;
    readonly step: KExpr;
    readonly stream: number;
    readonly index: KExpr;
  };

export type KStmt =
  /** Declares a local; `mutable` locals may be `set` later. */
  | {
    readonly k: "let";
    readonly name: string;
    readonly t: KType;
    readonly init: KExpr;
    readonly mutable: boolean;
  }
  | { readonly k: "set"; readonly name: string; readonly value: KExpr }
  | { readonly k: "store"; readonly buf: string; readonly index: KExpr; readonly value: KExpr }
  | { readonly k: "sstore"; readonly arr: string; readonly index: KExpr; readonly value: KExpr }
  /** for (var v: i32 = from; v < to; v += step) */
  | {
    readonly k: "for";
    readonly v: string;
    readonly from: KExpr;
    readonly to: KExpr;
    readonly step: KExpr;
    readonly body: readonly KStmt[];
  }
  | {
    readonly k: "if";
    readonly cond: KExpr;
    readonly then: readonly KStmt[];
    readonly else?: readonly KStmt[];
  }
  /** workgroupBarrier(): all threads of the workgroup must reach it (never inside divergent control flow). */
  | { readonly k: "barrier" }
  /**
   * Workgroup-wide reduction of `value` (one per thread) with `op`; afterwards every thread holds the
   * result in the new immutable local `out`. Uniform control flow required. Targets legalize it (WGSL: a
   * shared-memory tree; CUDA: warp shuffles then shared memory). The combination order is fixed by the
   * legalize rule, so results are deterministic run to run.
   */
  | {
    readonly k: "wg_reduce";
    readonly op: "sum" | "max";
    readonly t: KType;
    readonly value: KExpr;
    readonly out: string;
  }
  | { readonly k: "comment"; readonly text: string };

export interface KBinding {
  /** Name used in the kernel body (`load`/`store` refer to it). */
  readonly name: string;
  /** Plan buffer id this binding is attached to at launch. */
  readonly buffer: number;
  readonly t: KStorage;
  readonly access: "read" | "write" | "read_write";
  /** Number of elements of the bound buffer (for bounds and for splitting over binding-size limits). */
  readonly elements: number;
  /**
   * Set when the buffer is accessed as an array of four-lane vectors of `t` (elements is then a multiple
   * of 4): load and store indices count vectors (element index / 4), loads yield `vectorOf(t)` and
   * stores take it. The buffer must be bound at an offset aligned to the vector's size.
   */
  readonly vector?: 4;
  /**
   * Set by WebGPU's legalize rule where the buffer is over the adapter's binding limit: the buffer is
   * bound as consecutive ranges of this many elements (plan/binding_ranges.ts) and the WGSL emitter
   * routes each access to its range. Other targets bind the whole buffer and ignore it.
   */
  readonly rangeElements?: number;
}

export interface KShared {
  readonly name: string;
  readonly t: KType;
  readonly size: number;
}

export type KernelKind = "loop" | "reduce" | "matmul" | "scatter" | "attention" | "copy";

export interface Kernel {
  /** Unique, descriptive name, e.g. `k012_layernorm_fwd`; used for file names and error messages. */
  readonly name: string;
  readonly kind: KernelKind;
  readonly bindings: readonly KBinding[];
  readonly shared: readonly KShared[];
  readonly workgroupSize: number;
  /** Total number of workgroups (1-D); targets split it into a 2-D grid when over their limit. */
  readonly workgroups: number;
  readonly body: readonly KStmt[];
  /** Human-readable lines: what the kernel fuses (ops and model source lines). */
  readonly about: readonly string[];
  /** True when the kernel uses f16 arithmetic or storage (WGSL needs `enable f16`). */
  readonly usesF16: boolean;
}

// ---- constructors: short helpers so lowering code reads like the index math it builds --------------

export const lit = (v: number, t: KType = "i32"): KExpr => ({ k: "lit", t, v });
export const f32 = (v: number): KExpr => lit(v, "f32");
export const i32 = (v: number): KExpr => lit(v, "i32");
export const u32 = (v: number): KExpr => lit(v, "u32");
export const ref = (name: string, t: KType): KExpr => ({ k: "ref", t, name });
export const lid: KExpr = { k: "id", t: "i32", which: "lid" };
export const wgId: KExpr = { k: "id", t: "i32", which: "wg" };
export const gid: KExpr = { k: "id", t: "i32", which: "gid" };
export const load = (buf: string, index: KExpr, t: KType): KExpr => ({ k: "load", t, buf, index });
export const sload = (arr: string, index: KExpr, t: KType): KExpr => ({ k: "sload", t, arr, index });
export const cast = (a: KExpr, t: KType): KExpr => (a.t === t ? a : { k: "cast", t, a });
export const un = (op: KUnOp, a: KExpr): KExpr => ({ k: "un", t: a.t, op, a });
export const select = (cond: KExpr, a: KExpr, b: KExpr): KExpr => ({ k: "select", t: a.t, cond, a, b });
/** `a` in all four lanes (a vector stays as it is). */
export function splat(a: KExpr): KExpr {
  const t = vectorOf(a.t);
  if (t === undefined) throw new Error(`no vector type for ${a.t}`);
  return isVector(a.t) ? a : { k: "splat", t, a };
}
export const vec = (parts: readonly KExpr[]): KExpr => ({ k: "vec", t: vectorOf(parts[0].t)!, parts });
export const laneOf = (a: KExpr, lane: number): KExpr => ({ k: "lane", t: laneType(a.t), a, lane });

/** A binary op; comparisons yield bool (v4bool on vectors). Integer literals are folded where trivial. */
export function bin(op: KBinOp, a: KExpr, b: KExpr): KExpr {
  const t: KType = K_BINARY[op].compare ? (isVector(a.t) ? "v4bool" : "bool") : a.t;
  if (a.k === "lit" && b.k === "lit" && (a.t === "i32" || a.t === "u32") && a.t === b.t) {
    const folded = foldInt(op, a.v, b.v, a.t);
    if (folded !== undefined) return lit(folded, t === "bool" ? "bool" : a.t);
  }
  if (a.t === "i32" || a.t === "u32") {
    const isZero = (e: KExpr) => e.k === "lit" && e.v === 0;
    const isOne = (e: KExpr) => e.k === "lit" && e.v === 1;
    if (op === "add" && isZero(b)) return a;
    if (op === "add" && isZero(a)) return b;
    if (op === "sub" && isZero(b)) return a;
    if (op === "mul" && (isOne(b))) return a;
    if (op === "mul" && (isOne(a))) return b;
    if (op === "mul" && (isZero(a) || isZero(b))) return lit(0, a.t);
    if (op === "div" && isOne(b)) return a;
    if (op === "mod" && isOne(b)) return lit(0, a.t);
  }
  return { k: "bin", t, op, a, b };
}

/** Integer constant folding, per op; null where an op is left for the target to compute. */
const FOLD_INT: Record<
  KBinOp,
  ((a: number, b: number, wrap: (x: number) => number) => number | undefined) | null
> = {
  add: (a, b, wrap) => wrap(a + b),
  sub: (a, b, wrap) => wrap(a - b),
  mul: (a, b, wrap) => wrap(Math.imul(a, b)),
  div: (a, b, wrap) => (b === 0 ? undefined : wrap(Math.trunc(a / b))),
  mod: (a, b, wrap) => (b === 0 ? undefined : wrap(a % b)),
  max: (a, b) => Math.max(a, b),
  min: (a, b) => Math.min(a, b),
  eq: (a, b) => (a === b ? 1 : 0),
  lt: (a, b) => (a < b ? 1 : 0),
  ne: null,
  le: null,
  gt: null,
  ge: null,
  and: null,
  or: null,
};

function foldInt(op: KBinOp, a: number, b: number, t: "i32" | "u32"): number | undefined {
  const wrap = (x: number) => (t === "i32" ? x | 0 : x >>> 0);
  return FOLD_INT[op]?.(a, b, wrap);
}

export const add = (a: KExpr, b: KExpr) => bin("add", a, b);
export const sub = (a: KExpr, b: KExpr) => bin("sub", a, b);
export const mul = (a: KExpr, b: KExpr) => bin("mul", a, b);
export const div = (a: KExpr, b: KExpr) => bin("div", a, b);
export const mod = (a: KExpr, b: KExpr) => bin("mod", a, b);
export const lt = (a: KExpr, b: KExpr) => bin("lt", a, b);

export const let_ = (name: string, init: KExpr, mutable = false): KStmt => ({
  k: "let",
  name,
  t: init.t,
  init,
  mutable,
});
export const set = (name: string, value: KExpr): KStmt => ({ k: "set", name, value });
export const store = (buf: string, index: KExpr, value: KExpr): KStmt => ({ k: "store", buf, index, value });
export const for_ = (v: string, from: KExpr, to: KExpr, step: KExpr, body: KStmt[]): KStmt => ({
  k: "for",
  v,
  from,
  to,
  step,
  body,
});
export const if_ = (cond: KExpr, then: KStmt[], else_?: KStmt[]): KStmt =>
  else_ ? { k: "if", cond, then, else: else_ } : { k: "if", cond, then };
export const barrier: KStmt = { k: "barrier" };
