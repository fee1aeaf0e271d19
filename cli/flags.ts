/**
 * Numeric flags, parsed strictly and the same way by every command: an integer flag takes only digits
 * (no `1e3`, `0x10`, `1.0` or `Infinity`), a number flag only a decimal number, and each has a range that
 * the error message states. `Number()` alone would take `0x10`, `1e300` and the empty string.
 */
import { UsageError } from "./usage_error.ts";

const INT = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

export interface Range {
  min?: number;
  max?: number;
  /** The bounds themselves are excluded. */
  minExclusive?: boolean;
  maxExclusive?: boolean;
}

function rangeText(r: Range, integer: boolean): string {
  const lo = r.min === undefined ? "" : `${r.minExclusive ? ">" : ">="} ${r.min}`;
  const hi = r.max === undefined ? "" : `${r.maxExclusive ? "<" : "<="} ${r.max}`;
  const what = integer ? "an integer" : "a number";
  if (integer && r.max === Number.MAX_SAFE_INTEGER && !r.minExclusive && (r.min === 0 || r.min === 1)) {
    return r.min === 1 ? "a positive integer" : "a non-negative integer";
  }
  if (lo && hi) {
    if (!r.minExclusive && !r.maxExclusive) return `${what} from ${r.min} to ${r.max}`;
    return `${what} ${lo} and ${hi}`;
  }
  return `${what}${lo || hi ? " " + (lo || hi) : ""}`;
}

function inRange(x: number, r: Range): boolean {
  if (r.min !== undefined && (r.minExclusive ? x <= r.min : x < r.min)) return false;
  if (r.max !== undefined && (r.maxExclusive ? x >= r.max : x > r.max)) return false;
  return true;
}

/** An integer flag in a range (at most 2^53 - 1 whatever the range says). */
export function intFlag(flag: string, v: string | undefined, fallback: number, r: Range = {}): number {
  if (v === undefined) return fallback;
  const range = { ...r, max: Math.min(r.max ?? Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER) };
  const x = Number(v.trim());
  if (!INT.test(v.trim()) || !Number.isSafeInteger(x) || !inRange(x, range)) {
    throw new UsageError(`--${flag} must be ${rangeText(range, true)}, got '${v}'`);
  }
  return x;
}

/** A finite decimal number flag in a range. */
export function numberFlag(flag: string, v: string | undefined, fallback: number, r: Range = {}): number {
  if (v === undefined) return fallback;
  const x = Number(v.trim());
  if (!DECIMAL.test(v.trim()) || !Number.isFinite(x) || !inRange(x, r)) {
    throw new UsageError(`--${flag} must be ${rangeText(r, false)}, got '${v}'`);
  }
  return x;
}

/**
 * node:util's parseArgs refuses `--seed -5` as "argument is ambiguous" (the value looks like a flag).
 * A value that is a number is what the user meant; this joins such pairs as `--seed=-5` so the flag's own
 * parser can accept it or state its range.
 */
export function joinNegativeValues(args: readonly string[], stringFlags: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--") {
      out.push(...args.slice(i));
      break;
    }
    const next = args[i + 1];
    if (
      a.startsWith("--") && !a.includes("=") && stringFlags.has(a.slice(2)) && next !== undefined &&
      /^-(\d|\.\d|Infinity)/.test(next)
    ) {
      out.push(`${a}=${next}`);
      i++;
    } else out.push(a);
  }
  return out;
}
