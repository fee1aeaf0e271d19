/**
 * The WGSL emitter: kernel IR -> WGSL source. It runs the WGSL legalize rules (legalize_wgsl.ts) and then
 * only spells: one IR statement per line, bindings in `k.bindings` order (binding index = position), the
 * kernel's `about` lines as a comment header, the prelude helpers the kernel uses. Output is a pure
 * function of the kernel, so it is byte-identical run to run.
 */
import type { TargetKernel } from "../../plan/plan.ts";
import {
  isVector,
  type Kernel,
  type KExpr,
  type KStmt,
  type KType,
  laneType,
  vectorOf,
} from "../kernel_ir/ir.ts";
import { visitExprs, visitStmts } from "./ir_walk.ts";
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

// Precedence levels of spelled expressions; parentheses are added where WGSL's grammar needs them or
// where mixing would make a reader stop and think.
const ATOM = 100, UNARY = 90, MUL = 80, ADD = 70, REL = 50, BIT = 40, AND = 30, OR = 20;

interface Spelled {
  readonly s: string;
  readonly p: number;
  /** The operator at the top, for chains WGSL allows without parentheses (a && b && c). */
  readonly op?: string;
}

const atom = (s: string): Spelled => ({ s, p: ATOM });
const paren = (x: Spelled, need: boolean) => (need ? `(${x.s})` : x.s);

const isFloat = (t: KType) => laneType(t) === "f32" || laneType(t) === "f16";

/** The WGSL spelling of a type: scalars as themselves, four-lane vectors as vec4<lane type>. */
const typeName = (t: KType): string => (isVector(t) ? `vec4<${laneType(t)}>` : t);

/** The shortest decimal that reads back (through a double, as WGSL's abstract floats do) as `v`. */
function shortest(v: number, round: (x: number) => number): string {
  for (let digits = 1; digits <= 17; digits++) {
    const text = v.toPrecision(digits);
    if (round(Number(text)) === v && round(Math.fround(Number(text))) === v) {
      const s = String(Number(text));
      return /[.e]/.test(s) ? s : `${s}.0`;
    }
  }
  return String(v);
}

const F32_BITS: Record<string, string> = { inf: "0x7f800000u", "-inf": "0xff800000u", nan: "0x7fc00000u" };

function floatLiteral(v: number, t: "f32" | "f16"): Spelled {
  const r = t === "f32" ? Math.fround(v) : Math.f16round(v);
  if (!Number.isFinite(r)) {
    // WGSL has no literal for these; a bitcast of the f32 pattern is not a constant overflow.
    const bits = F32_BITS[Number.isNaN(r) ? "nan" : r > 0 ? "inf" : "-inf"];
    return atom(t === "f32" ? `bitcast<f32>(${bits})` : `f16(bitcast<f32>(${bits}))`);
  }
  const text = shortest(r, t === "f32" ? Math.fround : Math.f16round) + (t === "f16" ? "h" : "");
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

const BIN_OPS: Partial<Record<string, { sym: string; p: number }>> = {
  add: { sym: "+", p: ADD },
  sub: { sym: "-", p: ADD },
  mul: { sym: "*", p: MUL },
  div: { sym: "/", p: MUL },
  mod: { sym: "%", p: MUL },
  eq: { sym: "==", p: REL },
  ne: { sym: "!=", p: REL },
  lt: { sym: "<", p: REL },
  le: { sym: "<=", p: REL },
  gt: { sym: ">", p: REL },
  ge: { sym: ">=", p: REL },
};

const FLOAT_ONLY = new Set(["exp", "log", "tanh", "erf", "sqrt", "rsqrt"]);
const ARITH = new Set(["add", "sub", "mul", "div", "mod"]);

class Speller {
  private readonly k: Kernel;
  private readonly names = new WgslNamer();
  private readonly prelude = new Set<PreludeFn>();
  private readonly bindingType = new Map<string, KType>();
  private readonly sharedType = new Map<string, KType>();
  private readonly lines: string[] = [];
  private depth = 1;

  constructor(private readonly legal: WgslLegal) {
    this.k = legal.kernel;
    for (const b of this.k.bindings) this.bindingType.set(b.name, b.vector ? vectorOf(b.t)! : b.t);
    for (const s of this.k.shared) this.sharedType.set(s.name, s.t);
  }

  private fail(msg: string): never {
    throw new WgslEmitError(`kernel ${this.k.name}: ${msg}`);
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
    k.bindings.forEach((b, i) => {
      const access = b.access === "read" ? "read" : "read_write";
      const elem = b.vector ? `vec${b.vector}<${b.t}>` : b.t;
      decls.push(
        `@group(0) @binding(${i}) var<storage, ${access}> ${this.names.name(b.name)}: array<${elem}>;`,
      );
    });
    const shared = k.shared.map((s) =>
      `var<workgroup> ${this.names.name(s.name)}: array<${s.t}, ${s.size}>;`
    );

    // The body is spelled first: it decides which prelude helpers and ids are needed.
    const ids = this.usedIds();
    this.prologue(ids);
    this.block(k.body);
    const body = this.lines;

    const params: string[] = [];
    if (ids.has("lid")) params.push("@builtin(local_invocation_index) local_index: u32");
    if (ids.has("wg")) params.push("@builtin(workgroup_id) group_id: vec3<u32>");

    const parts: string[] = [header.join("\n")];
    if (this.needsF16()) parts.push("enable f16;");
    if (decls.length) parts.push(decls.join("\n"));
    if (shared.length) parts.push(shared.join("\n"));
    const prelude = preludeFor(this.prelude);
    if (prelude) parts.push(prelude);
    parts.push(
      [
        `@compute @workgroup_size(${k.workgroupSize})`,
        `fn main(${params.join(", ")}) {`,
        ...body,
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

  /** Which of the thread ids the body (and the grid guard) reads; gid implies lid and wg. */
  private usedIds(): Set<"lid" | "wg" | "gid"> {
    const ids = new Set<"lid" | "wg" | "gid">();
    visitExprs(this.k.body, (e) => {
      if (e.k === "id") ids.add(e.which);
    });
    if (this.legal.guard !== null) ids.add("wg");
    if (ids.has("gid")) {
      ids.add("lid");
      ids.add("wg");
    }
    return ids;
  }

  private prologue(ids: Set<string>): void {
    const [gx, gy] = this.legal.grid;
    if (ids.has("lid")) this.line("let lid = i32(local_index);");
    if (ids.has("wg")) {
      this.line(gy > 1 ? `let wg = i32(group_id.x + group_id.y * ${gx}u);` : "let wg = i32(group_id.x);");
    }
    if (this.legal.guard !== null) {
      this.line(`if (wg >= ${this.legal.guard}) {`);
      this.line("  return;");
      this.line("}");
    }
    if (ids.has("gid")) this.line(`let gid = wg * ${this.k.workgroupSize} + lid;`);
  }

  private line(text: string): void {
    this.lines.push("  ".repeat(this.depth) + text);
  }

  private block(body: readonly KStmt[]): void {
    for (const s of body) this.stmt(s);
  }

  private nested(body: readonly KStmt[]): void {
    this.depth++;
    this.block(body);
    this.depth--;
  }

  private stmt(s: KStmt): void {
    switch (s.k) {
      case "let":
        this.line(
          `${s.mutable ? "var" : "let"} ${this.names.name(s.name)}: ${typeName(s.t)} = ${
            this.expr(s.init).s
          };`,
        );
        return;
      case "set":
        this.line(`${this.names.name(s.name)} = ${this.expr(s.value).s};`);
        return;
      case "store": {
        const t = this.bindingType.get(s.buf) ?? this.fail(`store to unknown binding ${s.buf}`);
        if (s.value.t !== t) this.fail(`store of a ${s.value.t} value into ${t} binding ${s.buf}`);
        this.line(`${this.names.name(s.buf)}[${this.expr(s.index).s}] = ${this.expr(s.value).s};`);
        return;
      }
      case "sstore": {
        const t = this.sharedType.get(s.arr) ?? this.fail(`store to unknown shared array ${s.arr}`);
        if (s.value.t !== t) this.fail(`store of a ${s.value.t} value into ${t} shared array ${s.arr}`);
        this.line(`${this.names.name(s.arr)}[${this.expr(s.index).s}] = ${this.expr(s.value).s};`);
        return;
      }
      case "for": {
        const v = this.names.name(s.v);
        const to = this.expr(s.to);
        this.line(
          `for (var ${v}: i32 = ${this.expr(s.from).s}; ${v} < ${paren(to, to.p <= REL)}; ${v} += ${
            this.expr(s.step).s
          }) {`,
        );
        this.nested(s.body);
        this.line("}");
        return;
      }
      case "if":
        if (s.cond.t !== "bool") this.fail(`if condition is ${s.cond.t}, not bool`);
        this.line(`if (${this.expr(s.cond).s}) {`);
        this.nested(s.then);
        if (s.else && s.else.length) {
          this.line("} else {");
          this.nested(s.else);
        }
        this.line("}");
        return;
      case "barrier":
        this.line("workgroupBarrier();");
        return;
      case "comment":
        for (const text of s.text.split("\n")) this.line(`// ${text}`);
        return;
      case "wg_reduce":
        return this.fail("wg_reduce survived legalization (internal error)");
    }
  }

  private expr(e: KExpr): Spelled {
    switch (e.k) {
      case "lit":
        return this.literal(e.v, e.t);
      case "ref":
        return atom(this.names.name(e.name));
      case "id":
        return atom(e.which);
      case "load": {
        const t = this.bindingType.get(e.buf) ?? this.fail(`load from unknown binding ${e.buf}`);
        if (t !== e.t) this.fail(`load of ${e.t} from ${t} binding ${e.buf}`);
        return atom(`${this.names.name(e.buf)}[${this.expr(e.index).s}]`);
      }
      case "sload": {
        const t = this.sharedType.get(e.arr) ?? this.fail(`load from unknown shared array ${e.arr}`);
        if (t !== e.t) this.fail(`load of ${e.t} from ${t} shared array ${e.arr}`);
        return atom(`${this.names.name(e.arr)}[${this.expr(e.index).s}]`);
      }
      case "un":
        return this.unary(e);
      case "bin":
        return this.binary(e);
      case "select":
        return atom(`select(${this.expr(e.b).s}, ${this.expr(e.a).s}, ${this.expr(e.cond).s})`);
      case "cast":
        return this.cast(this.expr(e.a), e.a.t, e.t);
      case "splat":
        if (e.a.t !== laneType(e.t)) this.fail(`splat of a ${e.a.t} value to ${e.t}`);
        return atom(`${typeName(e.t)}(${this.expr(e.a).s})`);
      case "vec": {
        const t = laneType(e.t);
        if (e.parts.length !== 4 || e.parts.some((p) => p.t !== t)) this.fail(`malformed ${e.t} constructor`);
        return atom(`${typeName(e.t)}(${e.parts.map((p) => this.expr(p).s).join(", ")})`);
      }
      case "lane": {
        if (!isVector(e.a.t) || !(e.lane >= 0 && e.lane < 4)) this.fail(`lane ${e.lane} of a ${e.a.t} value`);
        const a = this.expr(e.a);
        return atom(`${paren(a, a.p < ATOM)}.${"xyzw"[e.lane]}`);
      }
      case "philox": {
        const fn = e.t === "v4f32" ? "bf_philox4" : "bf_philox";
        this.prelude.add(fn);
        const u = (x: KExpr) => this.cast(this.expr(x), x.t, "u32").s;
        return atom(`${fn}(${u(e.seed)}, ${u(e.step)}, ${e.stream >>> 0}u, ${u(e.index)})`);
      }
    }
  }

  private literal(v: number, t: KType): Spelled {
    if (isVector(t)) this.fail(`literal of vector type ${t} (splat a scalar literal)`);
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

  private cast(a: Spelled, from: KType, to: KType): Spelled {
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
  private helper(fn: "bf_erf" | "bf_tanh", a: Spelled, t: KType): Spelled {
    const f: PreludeFn = isVector(t) ? `${fn}4` : fn;
    this.prelude.add(f);
    if (laneType(t) !== "f16") return atom(`${f}(${a.s})`);
    const [f16, f32] = isVector(t) ? ["vec4<f16>", "vec4<f32>"] : ["f16", "f32"];
    return atom(`${f16}(${f}(${f32}(${a.s})))`);
  }

  private unary(e: Extract<KExpr, { k: "un" }>): Spelled {
    const a = this.expr(e.a);
    const t = e.a.t;
    if (FLOAT_ONLY.has(e.op) && !isFloat(t)) this.fail(`${e.op} of a ${t} value`);
    switch (e.op) {
      case "neg":
        if (laneType(t) === "u32") return { s: `0u - ${paren(a, a.p <= ADD)}`, p: ADD, op: "-" };
        if (laneType(t) === "bool") this.fail(`neg of a ${t} value`);
        return { s: `-${paren(a, a.p <= UNARY)}`, p: UNARY };
      case "not":
        return { s: `${laneType(t) === "bool" ? "!" : "~"}${paren(a, a.p <= UNARY)}`, p: UNARY };
      case "abs":
      case "exp":
      case "log":
      case "sqrt":
        return atom(`${e.op}(${a.s})`);
      case "rsqrt":
        return atom(`inverseSqrt(${a.s})`);
      case "reciprocal":
        return { s: `${oneOf(t)} / ${paren(a, a.p <= MUL)}`, p: MUL, op: "/" };
      case "tanh":
        return this.helper("bf_tanh", a, t);
      case "erf":
        return this.helper("bf_erf", a, t);
    }
  }

  private binary(e: Extract<KExpr, { k: "bin" }>): Spelled {
    // WGSL's arithmetic operators take a scalar beside a vector, so a splat operand is spelled bare there.
    const bare = ARITH.has(e.op) && isVector(e.a.t);
    const a = this.expr(bare && e.a.k === "splat" && e.b.k !== "splat" ? e.a.a : e.a);
    const b = this.expr(bare && e.b.k === "splat" && e.a.k !== "splat" ? e.b.a : e.b);
    if (e.op === "max" || e.op === "min") return atom(`${e.op}(${a.s}, ${b.s})`);
    if (e.op === "and" || e.op === "or") {
      if (e.a.t === "bool") {
        const [sym, p] = e.op === "and" ? ["&&", AND] : ["||", OR];
        const left = paren(a, a.p < REL && a.op !== sym);
        return { s: `${left} ${sym} ${paren(b, b.p < REL)}`, p, op: sym };
      }
      const sym = e.op === "and" ? "&" : "|";
      return { s: `${paren(a, a.p < UNARY)} ${sym} ${paren(b, b.p < UNARY)}`, p: BIT, op: sym };
    }
    const op = BIN_OPS[e.op] ?? this.fail(`unknown binary op ${e.op}`);
    if (op.p === REL) {
      return { s: `${paren(a, a.p <= REL)} ${op.sym} ${paren(b, b.p <= REL)}`, p: REL, op: op.sym };
    }
    // Arithmetic is left-associative: a same-level right operand keeps its parentheses (float addition is
    // not associative), and so does a negated one, for legibility.
    const left = paren(a, a.p < op.p);
    const right = paren(b, b.p <= op.p || b.p === UNARY);
    return { s: `${left} ${op.sym} ${right}`, p: op.p, op: op.sym };
  }
}
