/**
 * What the two spellings that compute half-precision values in f32 share — CUDA C (cuda.ts) and the CPU's
 * C (c.ts): f16/bf16 operands are widened to f32 and every result is rounded back, so + - * / sqrt give
 * exactly the half-precision result (24 >= 2·11 + 2 bits); unary ops go through a per-target table;
 * literals and conversions follow C's rules. Each spelling supplies only what differs: how a half widens
 * and rounds, how a float literal and an integer conversion are written, and how a float truncates to an
 * integer.
 */
import { isVector, type KExpr, type KType, type KUnOp } from "../kernel_ir/ir.ts";
import { atom, CFamilySpeller, paren, REL, type Spelled, type ThreadId, UNARY } from "./c_family.ts";

export const isHalf = (t: KType) => t === "f16" || t === "bf16";
export const isFloat = (t: KType) => t === "f32" || isHalf(t);

/** How one unary op is spelled: on floats (in f32), on integers and bool, and the helpers it needs. */
export interface UnarySpelling<Helper extends string> {
  readonly float?: (x: Spelled) => Spelled;
  readonly int?: (a: Spelled, t: KType) => Spelled;
  readonly helpers?: readonly Helper[];
}

export abstract class HalfInF32Speller<Helper extends string> extends CFamilySpeller {
  protected abstract readonly unarySpellings: Readonly<Record<KUnOp, UnarySpelling<Helper>>>;
  /** The prelude helpers the kernel uses. */
  protected readonly helpers = new Set<Helper>();

  protected need(helper: Helper): void {
    this.helpers.add(helper);
  }

  protected use(helper: "bf_philox" | "bf_philox4"): void {
    this.helpers.add(helper as Helper);
  }
  /** The target's name of a kernel-IR type. */
  protected abstract type(t: KType): string;
  /** An f16/bf16 value as f32 (exact); other types as they are. */
  protected abstract toF32(a: Spelled, t: KType): Spelled;
  /** An f32 value rounded to f16/bf16 (to nearest, ties to even); other types as they are. */
  protected abstract fromF32(a: Spelled, t: KType): Spelled;
  /** An f32 constant, NaN and infinities included. */
  protected abstract floatLiteral(v: number): Spelled;
  /** An integer value converted to the C type `type` (f32 or another integer type). */
  protected abstract convert(a: Spelled, type: string): Spelled;
  /** An f32 value truncated toward zero to i32 or u32. */
  protected abstract truncate(x: Spelled, to: KType): Spelled;

  protected loopVariable(v: string): string {
    return `int ${v}`;
  }

  protected idDeclaration(which: ThreadId): string {
    return `const int ${which}`;
  }

  protected select(cond: Spelled, a: Spelled, b: Spelled): Spelled {
    return atom(`(${paren(cond, cond.p < REL)} ? ${a.s} : ${b.s})`);
  }

  protected splat(e: Extract<KExpr, { k: "splat" }>): Spelled {
    return this.fail(`${e.k} of ${e.t} survived legalization (internal error)`);
  }

  /** Halves are computed in f32. */
  protected override operands(e: Extract<KExpr, { k: "bin" }>): [Spelled, Spelled] {
    const a = this.expr(e.a), b = this.expr(e.b);
    return isHalf(e.a.t) ? [this.toF32(a, e.a.t), this.toF32(b, e.a.t)] : [a, b];
  }

  /** Arithmetic on halves is rounded back (comparisons yield bool as they are). */
  protected override rounded(r: Spelled, t: KType): Spelled {
    return isHalf(t) ? this.fromF32(r, t) : r;
  }

  protected unary(op: KUnOp, a: Spelled, t: KType): Spelled {
    const spell = this.unarySpellings[op];
    spell.helpers?.forEach((h) => this.need(h));
    if (!isFloat(t)) return (spell.int ?? this.fail(`${op} of a ${t} value`))(a, t);
    const float = spell.float ?? this.fail(`${op} of a ${t} value`);
    return this.fromF32(float(this.toF32(a, t)), t);
  }

  protected literal(v: number, t: KType): Spelled {
    switch (t) {
      case "f32":
        return this.floatLiteral(v);
      case "f16":
      case "bf16":
        return this.fromF32(this.floatLiteral(t === "f16" ? Math.f16round(v) : bf16Round(v)), t);
      case "bool":
        return atom(v ? "true" : "false");
      case "u32":
        if (!Number.isInteger(v)) this.fail(`u32 literal ${v} is not an integer`);
        return atom(`${v >>> 0}u`);
      default: {
        if (!Number.isInteger(v)) this.fail(`${t} literal ${v} is not an integer`);
        const n = v | 0;
        if (n === -(2 ** 31)) return atom("(-2147483647 - 1)");
        return n < 0 ? { s: String(n), p: UNARY } : atom(String(n));
      }
    }
  }

  protected cast(a: Spelled, from: KType, to: KType): Spelled {
    if (from === to) return a;
    if (isVector(from) || isVector(to)) this.fail(`cast between ${from} and ${to} survived legalization`);
    if (to === "bool") {
      const zero = isFloat(from) ? "0.0f" : from === "u32" ? "0u" : "0";
      const x = this.toF32(a, from);
      return { s: `${paren(x, x.p <= REL)} != ${zero}`, p: REL, op: "!=" };
    }
    if (from === "bool") {
      const [one, zero] = isFloat(to) ? ["1.0f", "0.0f"] : to === "u32" ? ["1u", "0u"] : ["1", "0"];
      return this.fromF32(atom(`(${paren(a, a.p < REL)} ? ${one} : ${zero})`), to);
    }
    if (isFloat(from)) {
      const x = this.toF32(a, from);
      return isFloat(to) ? this.fromF32(x, to) : this.truncate(x, to);
    }
    // From an integer type.
    if (isFloat(to)) return this.fromF32(this.convert(a, "float"), to);
    return this.convert(a, this.type(to));
  }
}

/** The shortest decimal that C and C++ read back as exactly the f32 `v`. */
export function shortestF32(v: number): string {
  for (let digits = 1; digits <= 9; digits++) {
    const text = v.toPrecision(digits);
    const d = Number(text);
    // The C++ parser rounds the decimal to float directly; going through the double `d` agrees with it
    // unless `d` itself sits exactly halfway between two floats, which the second test rules out.
    if (Math.fround(d) === v && !isF32Midpoint(d)) {
      const s = String(d);
      return /[.e]/.test(s) ? s : `${s}.0`;
    }
  }
  return String(v);
}

/** Whether the double `d` lies exactly halfway between two adjacent f32 values. */
function isF32Midpoint(d: number): boolean {
  const f = Math.fround(d);
  if (f === d || !Number.isFinite(f)) return false;
  const buf = new DataView(new ArrayBuffer(4));
  buf.setFloat32(0, f);
  const bits = buf.getUint32(0);
  buf.setUint32(0, d > f === f > 0 ? bits + 1 : bits - 1);
  const other = buf.getFloat32(0);
  return (f + other) / 2 === d;
}

/** Rounds to the nearest bf16 (ties to even), as __float2bfloat16_rn does; the literal is then exact. */
export function bf16Round(v: number): number {
  const f = Math.fround(v);
  if (!Number.isFinite(f)) return f;
  const buf = new DataView(new ArrayBuffer(4));
  buf.setFloat32(0, f);
  const bits = buf.getUint32(0);
  const rounded = (bits + 0x7fff + ((bits >>> 16) & 1)) & 0xffff0000;
  buf.setUint32(0, rounded >>> 0);
  return buf.getFloat32(0);
}

/** An f32 literal with its sign outside (`-x` binds as a unary minus); `text` spells |v|. */
export function signedFloat(r: number, text: string): Spelled {
  return r < 0 || Object.is(r, -0) ? { s: `-${text}`, p: UNARY } : atom(text);
}
