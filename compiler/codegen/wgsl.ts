/**
 * The WGSL emitter: kernel IR -> WGSL source. It runs the WGSL legalize rules (legalize_wgsl.ts) and then
 * only spells: one IR statement per line, bindings in `k.bindings` order (binding index = position), the
 * kernel's `about` lines as a comment header, the prelude helpers the kernel uses. Output is a pure
 * function of the kernel, so it is byte-identical run to run.
 */
import type { TargetKernel } from "../../plan/plan.ts";
import { firstBindingNumbers, rangesOf } from "../../plan/binding_ranges.ts";
import {
  isVector,
  type KBinding,
  type Kernel,
  type KExpr,
  type KType,
  type KUnOp,
  laneType,
} from "../kernel_ir/ir.ts";
import { visitExprs, visitStmts } from "../kernel_ir/walk.ts";
import {
  atom,
  call,
  CFamilySpeller,
  isArithmetic,
  negate,
  not,
  paren,
  reciprocal,
  REL,
  type Spelled,
  type ThreadId,
  UNARY,
} from "./c_family.ts";
import { legalizeWGSL, type WgslLegal } from "./legalize_wgsl.ts";
import { WgslNamer } from "./wgsl_names.ts";
import { type PreludeFn, preludeFor } from "./wgsl_prelude.ts";

export class WgslEmitError extends Error {
  override name = "WgslEmitError";
}

/** Legalizes and spells `k`; `grid` is the dispatch shape the runtime passes to dispatchWorkgroups. */
export function emitWGSL(k: Kernel): TargetKernel {
  const legal = legalizeWGSL(k);
  return { code: new Speller(legal).kernel(), grid: legal.grid, workgroupSize: legal.kernel.workgroupSize };
}

/** The WGSL spelling of a type: scalars as themselves, four-lane vectors as vec4<lane type>. */
const typeName = (t: KType): string => (isVector(t) ? `vec4<${laneType(t)}>` : t);

/** The largest finite value of each float type: WGSL literals beyond it are errors, not rounding. */
const FINITE_MAX = { f32: 3.4028234663852886e38, f16: 65504 } as const;

/**
 * The shortest decimal that reads back (through a double, as WGSL's abstract floats do) as `v` and is
 * itself within the type's finite range: Tint rejects "3.4028235e+38", which rounds to FLT_MAX but is
 * above it.
 */
function shortest(v: number, t: "f32" | "f16"): string {
  const round = t === "f32" ? Math.fround : Math.f16round;
  for (let digits = 1; digits <= 17; digits++) {
    const text = v.toPrecision(digits);
    const read = Number(text);
    if (Math.abs(read) > FINITE_MAX[t]) continue;
    if (round(read) === v && round(Math.fround(read)) === v) {
      const s = String(Number(text));
      return /[.e]/.test(s) ? s : `${s}.0`;
    }
  }
  return String(v);
}

function floatLiteral(v: number, t: "f32" | "f16"): Spelled {
  const r = t === "f32" ? Math.fround(v) : Math.f16round(v);
  if (Number.isNaN(r)) {
    // No kernel the compiler writes holds a NaN constant (Tint would reject this one as a constant too).
    return atom(t === "f32" ? "bitcast<f32>(0x7fc00000u)" : "f16(bitcast<f32>(0x7fc00000u))");
  }
  if (!Number.isFinite(r)) {
    // WGSL has no infinite constant: Tint rejects any constant expression that evaluates to one (the
    // bitcast of 0xff800000u included), and the spec lets implementations assume no infinities at all.
    // The compiler's infinities are identities of max and min reductions (and their workgroup trees), for
    // which the largest finite value serves over every finite input: a row masked with -10000 reduces
    // as before. A -inf that a graph itself holds reads as -FLT_MAX here; docs/web.md says why.
    return floatLiteral(r > 0 ? FINITE_MAX[t] : -FINITE_MAX[t], t);
  }
  const text = shortest(r, t) + (t === "f16" ? "h" : "");
  // -0 keeps its sign through toPrecision only as "0"; spell it explicitly.
  const signed = Object.is(r, -0) ? `-${text}` : text;
  return signed.startsWith("-") ? { s: signed, p: UNARY } : atom(signed);
}

/** Zero of `t`; for a vector, of its lane type (vector arithmetic takes a scalar operand). */
function zeroOf(t: KType): string {
  switch (laneType(t)) {
    case "f32":
      return "0.0";
    case "f16":
      return "0.0h";
    case "u32":
      return "0u";
    case "bool":
      return "false";
    default:
      return "0";
  }
}

function oneOf(t: KType): string {
  const l = laneType(t);
  return l === "f32" ? "1.0" : l === "f16" ? "1.0h" : l === "u32" ? "1u" : l === "bool" ? "true" : "1";
}

/** `x` in all lanes of `t` when `t` is a vector (a WGSL splat constructor), else `x` itself. */
const splatOf = (t: KType, x: string): string => (isVector(t) ? `${typeName(t)}(${x})` : x);

type Helper = "bf_erf" | "bf_tanh";

/** How WGSL spells each unary op (operand types are checked before). */
const SPELL_UNARY: Record<KUnOp, (s: Speller, a: Spelled, t: KType) => Spelled> = {
  neg: (_, a, t) => negate(a, laneType(t) === "u32"),
  not: (_, a, t) => not(a, laneType(t) === "bool"),
  abs: (_, a) => call("abs")(a),
  exp: (_, a) => call("exp")(a),
  log: (_, a) => call("log")(a),
  sqrt: (_, a) => call("sqrt")(a),
  rsqrt: (_, a) => call("inverseSqrt")(a),
  reciprocal: (_, a, t) => reciprocal(a, oneOf(t)),
  tanh: (s, a, t) => s.helper("bf_tanh", a, t),
  erf: (s, a, t) => s.helper("bf_erf", a, t),
};

class Speller extends CFamilySpeller {
  private readonly names = new WgslNamer();
  private readonly prelude = new Set<PreludeFn>();
  protected readonly barrier = "workgroupBarrier();";
  protected readonly builtins = { lid: "local_index", x: "group_id.x", y: "group_id.y" };

  constructor(legal: WgslLegal) {
    super(legal);
  }

  protected error(msg: string): Error {
    return new WgslEmitError(msg);
  }

  kernel(): string {
    const k = this.k;
    // No kernel name in the text: kernels that differ only in name (the same fusion in every encoder
    // layer) then have identical source, which the kernel writer stores once and the runtime compiles once.
    const header = k.about.flatMap((a) => a.split("\n")).map((a) => `// ${a}`);
    const [gx, gy] = this.legal.grid;
    header.push(
      `// launch: ${k.workgroups} workgroups of ${k.workgroupSize} threads` +
        (gy > 1 ? ` as a ${gx} x ${gy} grid (linear id = x + y * ${gx})` : ""),
    );
    const decls: string[] = [];
    const first = firstBindingNumbers(k.bindings);
    k.bindings.forEach((b, i) => {
      const access = b.access === "read" ? "read" : "read_write";
      const elem = b.vector ? `vec${b.vector}<${b.t}>` : b.t;
      const arrays = b.rangeElements === undefined ? [this.names.name(b.name)] : this.rangeArrays(b);
      arrays.forEach((name, r) =>
        decls.push(`@group(0) @binding(${first[i] + r}) var<storage, ${access}> ${name}: array<${elem}>;`)
      );
    });
    const shared = k.shared.map((s) =>
      `var<workgroup> ${this.names.name(s.name)}: array<${s.t}, ${s.size}>;`
    );

    // The body is spelled first: it decides which prelude helpers and ids are needed.
    const { lines, ids } = this.body();

    const params: string[] = [];
    if (ids.has("lid")) params.push("@builtin(local_invocation_index) local_index: u32");
    if (ids.has("wg")) params.push("@builtin(workgroup_id) group_id: vec3<u32>");

    const parts: string[] = [header.join("\n")];
    if (this.needsF16()) parts.push("enable f16;");
    if (decls.length) parts.push(decls.join("\n"));
    if (shared.length) parts.push(shared.join("\n"));
    const prelude = preludeFor(this.prelude);
    if (prelude) parts.push(prelude);
    if (this.rangeAccessors.length) parts.push(this.rangeAccessors.join("\n\n"));
    parts.push(
      [
        `@compute @workgroup_size(${k.workgroupSize})`,
        `fn main(${params.join(", ")}) {`,
        ...lines,
        "}",
      ].join("\n"),
    );
    return parts.join("\n\n") + "\n";
  }

  private needsF16(): boolean {
    const k = this.k;
    if (k.usesF16 || k.bindings.some((b) => b.t === "f16") || k.shared.some((s) => s.t === "f16")) {
      return true;
    }
    let f16 = false;
    visitStmts(k.body, (s) => (f16 ||= s.k === "let" && laneType(s.t) === "f16"));
    visitExprs(k.body, (e) => (f16 ||= laneType(e.t) === "f16"));
    return f16;
  }

  // ---- the C-family hooks -------------------------------------------------------------------------

  protected local(name: string): string {
    return this.names.name(name);
  }

  protected sharedName(name: string): string {
    return this.names.name(name);
  }

  protected bufferAccess(buf: string): string {
    return this.names.name(buf);
  }

  // ---- bindings over the binding limit, bound as ranges (plan/binding_ranges.ts) ---------------------

  /** The range arrays of each split binding, by IR name. */
  private readonly ranges = new Map<
    string,
    { readonly arrays: readonly string[]; readonly length: number }
  >();
  /** The accessor functions the body calls, in first-use order, and their names by (binding, kind). */
  private readonly rangeAccessors: string[] = [];
  private readonly accessorNames = new Map<string, string>();

  private rangeArrays(b: KBinding): string[] {
    const arrays = Array.from({ length: rangesOf(b) }, (_, r) => this.names.name(`${b.name}#r${r}`));
    // Indices of a vector binding count vectors; ranges hold whole vectors (binding_ranges.ts).
    this.ranges.set(b.name, { arrays, length: b.rangeElements! / (b.vector ?? 1) });
    return arrays;
  }

  /**
   * The accessor of a split binding: a function that tests which range the index falls in. Ranges are
   * few (a 2 GiB buffer under a 128 MiB limit makes 16), and an index is in range 0 for most buffers'
   * first 128 MiB, so the chain of tests is cheap beside the access itself.
   */
  private accessor(buf: string, t: KType, store: boolean): string {
    const key = `${store ? "store" : "load"}#${buf}`;
    const have = this.accessorNames.get(key);
    if (have !== undefined) return have;
    const name = this.names.name(key);
    this.accessorNames.set(key, name);
    const { arrays, length } = this.ranges.get(buf)!;
    const at = (r: number) => (r === 0 ? "i" : `i - ${r * length}`);
    const lines = arrays.map((array, r) => {
      const access = `${array}[${at(r)}]`;
      const body = store ? `${access} = v; return;` : `return ${access};`;
      return r === arrays.length - 1 ? `  ${body}` : `  if (i < ${(r + 1) * length}) { ${body} }`;
    });
    const signature = store
      ? `fn ${name}(i: i32, v: ${typeName(t)})`
      : `fn ${name}(i: i32) -> ${typeName(t)}`;
    this.rangeAccessors.push([`${signature} {`, ...lines, "}"].join("\n"));
    return name;
  }

  private signedIndex(index: KExpr): string {
    const i = this.index(index);
    return index.t === "u32" ? this.toInt(i) : i;
  }

  protected override loadFrom(buf: string, t: KType, index: KExpr): string {
    if (!this.ranges.has(buf)) return super.loadFrom(buf, t, index);
    return `${this.accessor(buf, t, false)}(${this.signedIndex(index)})`;
  }

  protected override storeInto(buf: string, t: KType, index: KExpr, value: () => string): string {
    if (!this.ranges.has(buf)) return super.storeInto(buf, t, index, value);
    return `${this.accessor(buf, t, true)}(${this.signedIndex(index)}, ${value()});`;
  }

  protected declaration(name: string, t: KType, mutable: boolean): string {
    return `${mutable ? "var" : "let"} ${this.names.name(name)}: ${typeName(t)}`;
  }

  protected loopVariable(v: string): string {
    return `var ${v}: i32`;
  }

  protected idDeclaration(which: ThreadId): string {
    return `let ${which}`;
  }

  protected toInt(x: string): string {
    return `i32(${x})`;
  }

  protected use(helper: PreludeFn): void {
    this.prelude.add(helper);
  }

  protected reduceGroup(): never {
    return this.fail("wg_reduce survived legalization (internal error)");
  }

  protected select(cond: Spelled, a: Spelled, b: Spelled): Spelled {
    return atom(`select(${b.s}, ${a.s}, ${cond.s})`);
  }

  protected splat(e: Extract<KExpr, { k: "splat" }>): Spelled {
    if (e.a.t !== laneType(e.t)) this.fail(`splat of a ${e.a.t} value to ${e.t}`);
    return atom(`${typeName(e.t)}(${this.expr(e.a).s})`);
  }

  protected vector(t: KType, parts: readonly string[]): Spelled {
    return atom(`${typeName(t)}(${parts.join(", ")})`);
  }

  protected minMax(op: "max" | "min"): string {
    return op;
  }

  /** WGSL's arithmetic operators take a scalar beside a vector, so a splat operand is spelled bare there. */
  protected override operands(e: Extract<KExpr, { k: "bin" }>): [Spelled, Spelled] {
    const bare = isArithmetic(e.op) && isVector(e.a.t);
    const a = this.expr(bare && e.a.k === "splat" && e.b.k !== "splat" ? e.a.a : e.a);
    const b = this.expr(bare && e.b.k === "splat" && e.a.k !== "splat" ? e.b.a : e.b);
    return [a, b];
  }

  protected unary(op: KUnOp, a: Spelled, t: KType): Spelled {
    return SPELL_UNARY[op](this, a, t);
  }

  protected literal(v: number, t: KType): Spelled {
    switch (t) {
      case "f32":
      case "f16":
        return floatLiteral(v, t);
      case "bool":
        return atom(v ? "true" : "false");
      case "u32":
        if (!Number.isInteger(v)) this.fail(`u32 literal ${v} is not an integer`);
        return atom(`${v >>> 0}u`);
      default: {
        if (!Number.isInteger(v)) this.fail(`${t} literal ${v} is not an integer`);
        const n = v | 0;
        return n < 0 ? { s: String(n), p: UNARY } : atom(String(n));
      }
    }
  }

  protected cast(a: Spelled, from: KType, to: KType): Spelled {
    if (from === to) return a;
    if (isVector(from) !== isVector(to)) this.fail(`cast between ${from} and ${to} (use splat or lane)`);
    const zero = splatOf(from, zeroOf(from));
    if (laneType(to) === "bool") return { s: `${paren(a, a.p <= REL)} != ${zero}`, p: REL, op: "!=" };
    if (laneType(from) === "bool") {
      return atom(`select(${splatOf(to, zeroOf(to))}, ${splatOf(to, oneOf(to))}, ${a.s})`);
    }
    return atom(`${typeName(to)}(${a.s})`);
  }

  /**
   * A call of an f32 prelude helper (its vec4<f32> variant on vectors); f16 arguments go up to f32 and
   * the result comes back down.
   */
  helper(fn: Helper, a: Spelled, t: KType): Spelled {
    const f: PreludeFn = isVector(t) ? `${fn}4` : fn;
    this.prelude.add(f);
    if (laneType(t) !== "f16") return atom(`${f}(${a.s})`);
    const [f16, f32] = isVector(t) ? ["vec4<f16>", "vec4<f32>"] : ["f16", "f32"];
    return atom(`${f16}(${f}(${f32}(${a.s})))`);
  }
}
