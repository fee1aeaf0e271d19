/**
 * What each kernel-IR op tells about the integers it computes: the interval its result lies in (the CUDA
 * safe-loads rule proves loads in range with it, codegen/cuda_bounds.ts) and a divisor and the sign of
 * its result (the vectorizer proves four consecutive elements with it, lower/vectorize.ts). One transfer
 * function per op and fact, in `Record<KBinOp, ...>` tables, so a new op has to say what it preserves.
 * The passes supply the environment: what a local or a thread id is known to be under their own scoping
 * rules (branch facts there, lane classes here).
 */
import type { KBinOp } from "./kernel_ops.ts";

// ---- intervals ------------------------------------------------------------------------------------

/**
 * A closed integer interval; unbounded ends are ±Infinity. lo > hi is the empty range: the value cannot
 * exist there (a branch whose conditions contradict each other, a loop that never runs), so any claim
 * about it holds.
 */
export interface Range {
  readonly lo: number;
  readonly hi: number;
}

export const TOP: Range = { lo: -Infinity, hi: Infinity };
export const I32_MIN = -(2 ** 31), I32_MAX = 2 ** 31 - 1, U32_MAX = 2 ** 32 - 1;

export const range = (lo: number, hi: number): Range => ({ lo, hi });
export const isEmpty = (r: Range) => r.lo > r.hi;
export const join = (a: Range, b: Range): Range =>
  isEmpty(a) ? b : isEmpty(b) ? a : { lo: Math.min(a.lo, b.lo), hi: Math.max(a.hi, b.hi) };
export const meet = (a: Range, b: Range): Range => ({ lo: Math.max(a.lo, b.lo), hi: Math.min(a.hi, b.hi) });

/** A result that may have wrapped around its type is unknown. */
export function fits(r: Range, t: string): Range {
  const [min, max] = t === "u32" ? [0, U32_MAX] : [I32_MIN, I32_MAX];
  return isEmpty(r) || (r.lo >= min && r.hi <= max) ? r : TOP;
}

/** `r` within the values of type `t` (unbounded ends stand for the type's limits). */
export const within = (r: Range, t: string): Range =>
  t === "u32" ? meet(r, range(0, U32_MAX)) : meet(r, range(I32_MIN, I32_MAX));

// ---- divisors and sign ----------------------------------------------------------------------------

/** Known facts of an integer value: every value is a multiple of `d` (0: it is 0), and >= 0. */
export interface Divisor {
  readonly d: number;
  readonly nonneg: boolean;
}

export const NO_DIVISOR: Divisor = { d: 1, nonneg: false };

export function gcd(a: number, b: number): number {
  a = Math.abs(a);
  b = Math.abs(b);
  while (b) [a, b] = [b, a % b];
  return a;
}

// ---- the rule of each op ---------------------------------------------------------------------------

/**
 * What a binary op's result is known to be from its operands: its interval (`wraps`: the result may wrap
 * around its type) and its divisor and sign (`k`: the right operand when it is a positive integer
 * literal). null: nothing is known (the result is not an integer).
 */
const RULES: Record<
  KBinOp,
  {
    readonly of: (a: Range, b: Range) => Range;
    readonly wraps: boolean;
    readonly divisor: (a: Divisor, b: Divisor, k: number | undefined) => Divisor;
  } | null
> = {
  add: {
    of: (a, b) => range(a.lo + b.lo, a.hi + b.hi),
    wraps: true,
    divisor: (a, b) => ({ d: gcd(a.d, b.d), nonneg: a.nonneg && b.nonneg }),
  },
  sub: {
    of: (a, b) => range(a.lo - b.hi, a.hi - b.lo),
    wraps: true,
    divisor: (a, b) => ({ d: gcd(a.d, b.d), nonneg: false }),
  },
  mul: {
    of: (a, b) => {
      const p = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi].map((x) => (Number.isNaN(x) ? 0 : x));
      return range(Math.min(...p), Math.max(...p));
    },
    wraps: true,
    divisor: (a, b) => ({ d: a.d * b.d, nonneg: a.nonneg && b.nonneg }),
  },
  // Truncating division by a divisor of one sign: monotone in each argument.
  div: {
    of: (a, b) => {
      if (!(b.lo >= 1 || b.hi <= -1)) return TOP;
      const q = [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi].map((x) =>
        Number.isNaN(x) ? 0 : Math.trunc(x)
      );
      return range(Math.min(...q), Math.max(...q));
    },
    wraps: true,
    divisor: (a, _, k) => (k === undefined ? NO_DIVISOR : { d: a.d % k ? 1 : a.d / k, nonneg: a.nonneg }),
  },
  // Truncating remainder: the sign of the dividend, magnitude below the divisor's.
  mod: {
    of: (a, b) => {
      const m = Math.max(Math.abs(b.lo), Math.abs(b.hi));
      if (b.lo <= 0 && b.hi >= 0) return TOP;
      if (a.lo >= 0) return range(0, Math.min(a.hi, m - 1));
      if (a.hi <= 0) return range(Math.max(a.lo, -(m - 1)), 0);
      return range(-(m - 1), m - 1);
    },
    wraps: false,
    divisor: (a, _, k) => (k === undefined ? NO_DIVISOR : { d: gcd(a.d, k), nonneg: a.nonneg }),
  },
  max: {
    of: (a, b) => range(Math.max(a.lo, b.lo), Math.max(a.hi, b.hi)),
    wraps: false,
    divisor: (a, b) => ({ d: gcd(a.d, b.d), nonneg: a.nonneg || b.nonneg }),
  },
  min: {
    of: (a, b) => range(Math.min(a.lo, b.lo), Math.min(a.hi, b.hi)),
    wraps: false,
    divisor: (a, b) => ({ d: gcd(a.d, b.d), nonneg: a.nonneg && b.nonneg }),
  },
  and: null,
  or: null,
  eq: null,
  ne: null,
  lt: null,
  le: null,
  gt: null,
  ge: null,
};

/** The interval of `op` on integers of type `t` in the intervals `a` and `b` (neither empty). */
export function rangeOfBinary(op: KBinOp, t: string, a: Range, b: Range): Range {
  const rule = RULES[op];
  if (rule === null) return TOP;
  const r = rule.of(within(a, t), within(b, t));
  return rule.wraps ? fits(r, t) : r;
}

/** The divisor and sign of `op`'s result from its operands' (`k`: see RULES). */
export function divisorOfBinary(op: KBinOp, a: Divisor, b: Divisor, k: number | undefined): Divisor {
  return RULES[op]?.divisor(a, b, k) ?? NO_DIVISOR;
}
