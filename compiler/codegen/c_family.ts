/**
 * The C-family emitter base: what WGSL and CUDA C spell alike. Expressions with C's operators and
 * precedence (and the parentheses that go with them), statements (let, set, store, for, if, comment, the
 * grouping of wg_reduce), nesting and indentation, the thread-id prologue, and the checks of loads,
 * stores and operand types. A target (wgsl.ts, cuda.ts) supplies only its spelling: type names,
 * literals, casts, builtin calls, barriers and the text around the body (bindings, prelude, entry point).
 */
import {
  isVector,
  K_BINARY,
  K_UNARY,
  type Kernel,
  type KExpr,
  type KStmt,
  type KType,
  type KUnOp,
  laneType,
  vectorOf,
} from "../kernel_ir/ir.ts";
import { accepts } from "../kernel_ir/kernel_ops.ts";
import { visitExprs } from "../kernel_ir/walk.ts";

// Precedence levels of spelled expressions; parentheses are added where the grammar needs them or where
// mixing would make a reader stop and think (bitwise operators against comparisons, always).
export const ATOM = 100, UNARY = 90, MUL = 80, ADD = 70, REL = 50, BIT = 40, AND = 30, OR = 20;

/** A spelled expression with the precedence of its top operator. */
export interface Spelled {
  readonly s: string;
  readonly p: number;
  /** The operator at the top, for chains both languages read without parentheses (a && b && c). */
  readonly op?: string;
}

export const atom = (s: string): Spelled => ({ s, p: ATOM });
export const paren = (x: Spelled, need: boolean) => (need ? `(${x.s})` : x.s);
/** `fn(a)`. */
export const call = (fn: string) => (a: Spelled): Spelled => atom(`${fn}(${a.s})`);
/** `-a`, or `0u - a` on unsigned integers (which have no negation). */
export const negate = (a: Spelled, unsigned: boolean): Spelled =>
  unsigned
    ? { s: `0u - ${paren(a, a.p <= ADD)}`, p: ADD, op: "-" }
    : { s: `-${paren(a, a.p <= UNARY)}`, p: UNARY };
/** `!a` on bool, `~a` on integers. */
export const not = (a: Spelled, bool: boolean): Spelled => ({
  s: `${bool ? "!" : "~"}${paren(a, a.p <= UNARY)}`,
  p: UNARY,
});
/** `one / a`. */
export const reciprocal = (a: Spelled, one: string): Spelled => ({
  s: `${one} / ${paren(a, a.p <= MUL)}`,
  p: MUL,
  op: "/",
});

/** How C spells each binary op: an infix operator, a call (min/max), or && / || on bool and & / | else. */
type CBinary =
  | { readonly kind: "infix"; readonly sym: string; readonly p: number }
  | { readonly kind: "call" }
  | { readonly kind: "logic"; readonly bool: readonly [string, number]; readonly bits: string };

const C_BINARY: Record<keyof typeof K_BINARY, CBinary> = {
  add: { kind: "infix", sym: "+", p: ADD },
  sub: { kind: "infix", sym: "-", p: ADD },
  mul: { kind: "infix", sym: "*", p: MUL },
  div: { kind: "infix", sym: "/", p: MUL },
  mod: { kind: "infix", sym: "%", p: MUL },
  max: { kind: "call" },
  min: { kind: "call" },
  and: { kind: "logic", bool: ["&&", AND], bits: "&" },
  or: { kind: "logic", bool: ["||", OR], bits: "|" },
  eq: { kind: "infix", sym: "==", p: REL },
  ne: { kind: "infix", sym: "!=", p: REL },
  lt: { kind: "infix", sym: "<", p: REL },
  le: { kind: "infix", sym: "<=", p: REL },
  gt: { kind: "infix", sym: ">", p: REL },
  ge: { kind: "infix", sym: ">=", p: REL },
};

/** Arithmetic with an operator (+ - * / %), where WGSL takes a scalar operand beside a vector. */
export const isArithmetic = (op: keyof typeof K_BINARY) => {
  const c = C_BINARY[op];
  return c.kind === "infix" && c.p !== REL;
};

/** What a target's legalize rules hand the emitter: the rewritten kernel and its launch grid. */
export interface Legal {
  readonly kernel: Kernel;
  readonly grid: readonly [number, number, number];
  /** Workgroups whose linear id is at or past this return at once (set only for a padded 2-D grid). */
  readonly guard: number | null;
}

export type ThreadId = "lid" | "wg" | "gid";
type Reduce = Extract<KStmt, { k: "wg_reduce" }>;

export abstract class CFamilySpeller {
  protected readonly k: Kernel;
  protected readonly bindingType = new Map<string, KType>();
  protected readonly readOnly = new Set<string>();
  protected readonly sharedType = new Map<string, KType>();
  protected readonly lines: string[] = [];
  protected depth = 1;

  constructor(protected readonly legal: Legal) {
    this.k = legal.kernel;
    for (const b of this.k.bindings) {
      this.bindingType.set(b.name, b.vector ? vectorOf(b.t)! : b.t);
      if (b.access === "read") this.readOnly.add(b.name);
    }
    for (const s of this.k.shared) this.sharedType.set(s.name, s.t);
  }

  // ---- the target's spelling ----------------------------------------------------------------------

  protected abstract error(msg: string): Error;
  /** Identifiers of IR names: locals (and loop variables), bindings, shared arrays. */
  protected abstract local(name: string): string;
  protected abstract sharedName(name: string): string;
  /** A binding as an array of values of type `t` (`read`: for a load). */
  protected abstract bufferAccess(buf: string, t: KType, read: boolean): string;
  /** `var x: T` / `const T x` and the like, before ` = init;`. */
  protected abstract declaration(name: string, t: KType, mutable: boolean): string;
  /** The declaration of the loop variable `v` (an i32). */
  protected abstract loopVariable(v: string): string;
  /** The statement of a workgroup barrier. */
  protected abstract readonly barrier: string;
  /** `let lid` / `const int lid` and the like, before ` = value;`. */
  protected abstract idDeclaration(which: ThreadId): string;
  /** The builtins of the thread within its workgroup and the workgroup's grid position. */
  protected abstract readonly builtins: { readonly lid: string; readonly x: string; readonly y: string };
  /** An unsigned builtin as i32. */
  protected abstract toInt(x: string): string;
  protected abstract literal(v: number, t: KType): Spelled;
  protected abstract cast(a: Spelled, from: KType, to: KType): Spelled;
  protected abstract unary(op: KUnOp, a: Spelled, t: KType): Spelled;
  protected abstract select(cond: Spelled, a: Spelled, b: Spelled): Spelled;
  protected abstract splat(e: Extract<KExpr, { k: "splat" }>): Spelled;
  protected abstract vector(t: KType, parts: readonly string[]): Spelled;
  /** The function that computes max or min of values of type `t`. */
  protected abstract minMax(op: "max" | "min", t: KType): string;
  /** Notes that the kernel calls a prelude helper. */
  protected abstract use(helper: "bf_philox" | "bf_philox4"): void;
  /** A group of adjacent wg_reduce statements (one, where the target groups none). */
  protected abstract reduceGroup(group: readonly Reduce[]): void;

  /** The operands of a binary op as spelled (a target may widen them, or drop a splat WGSL needs not). */
  protected operands(e: Extract<KExpr, { k: "bin" }>): [Spelled, Spelled] {
    return [this.expr(e.a), this.expr(e.b)];
  }

  /** The result of arithmetic on values of type `t` (a target may round it back to a narrow type). */
  protected rounded(r: Spelled, _t: KType): Spelled {
    return r;
  }

  /** Thread ids read beyond those the body names (and the grid guard's). */
  protected moreIds(_ids: Set<ThreadId>): void {}

  // ---- shared spelling ----------------------------------------------------------------------------

  protected fail(msg: string): never {
    throw this.error(`kernel ${this.k.name}: ${msg}`);
  }

  /** The body's lines (prologue first) and the thread ids it reads; spelled before anything around it. */
  protected body(): { lines: readonly string[]; ids: ReadonlySet<ThreadId> } {
    const ids = this.usedIds();
    this.prologue(ids);
    this.block(this.k.body);
    return { lines: this.lines, ids };
  }

  /** Which of the thread ids the body (and the grid guard) reads; gid implies lid and wg. */
  private usedIds(): Set<ThreadId> {
    const ids = new Set<ThreadId>();
    visitExprs(this.k.body, (e) => {
      if (e.k === "id") ids.add(e.which);
    });
    this.moreIds(ids);
    if (this.legal.guard !== null) ids.add("wg");
    if (ids.has("gid")) {
      ids.add("lid");
      ids.add("wg");
    }
    return ids;
  }

  private prologue(ids: ReadonlySet<ThreadId>): void {
    const [gx, gy] = this.legal.grid;
    const b = this.builtins;
    if (ids.has("lid")) this.line(`${this.idDeclaration("lid")} = ${this.toInt(b.lid)};`);
    if (ids.has("wg")) {
      this.line(`${this.idDeclaration("wg")} = ${this.toInt(gy > 1 ? `${b.x} + ${b.y} * ${gx}u` : b.x)};`);
    }
    if (this.legal.guard !== null) {
      // The workgroup id is uniform across the workgroup, so returning here is legal before barriers.
      this.line(`if (wg >= ${this.legal.guard}) {`);
      this.line("  return;");
      this.line("}");
    }
    if (ids.has("gid")) this.line(`${this.idDeclaration("gid")} = wg * ${this.k.workgroupSize} + lid;`);
  }

  protected line(text: string): void {
    this.lines.push("  ".repeat(this.depth) + text);
  }

  protected block(body: readonly KStmt[]): void {
    for (let i = 0; i < body.length; i++) {
      const s = body[i];
      if (s.k !== "wg_reduce") {
        this.stmt(s);
        continue;
      }
      // Adjacent reductions form one group (CUDA makes them share one barrier).
      const group: Reduce[] = [];
      while (i < body.length && body[i].k === "wg_reduce") group.push(body[i++] as Reduce);
      i--;
      this.reduceGroup(group);
    }
  }

  /** What `inside` writes, one level deeper. */
  protected indented(inside: () => void): void {
    this.depth++;
    inside();
    this.depth--;
  }

  /** `head {`, what `inside` writes one level deeper, `}`. */
  protected braced(head: string, inside: () => void): void {
    this.line(`${head} {`);
    this.indented(inside);
    this.line("}");
  }

  protected stmt(s: Exclude<KStmt, Reduce>): void {
    switch (s.k) {
      case "let": {
        if (s.init.t !== s.t) this.fail(`let ${s.name}: ${s.t} initialized with a ${s.init.t} value`);
        const init = this.expr(s.init);
        this.line(`${this.declaration(s.name, s.t, s.mutable)} = ${init.s};`);
        return;
      }
      case "set":
        this.line(`${this.local(s.name)} = ${this.expr(s.value).s};`);
        return;
      case "store": {
        const t = this.bindingType.get(s.buf) ?? this.fail(`store to unknown binding ${s.buf}`);
        if (s.value.t !== t) this.fail(`store of a ${s.value.t} value into ${t} binding ${s.buf}`);
        if (this.readOnly.has(s.buf)) this.fail(`store to read-only binding ${s.buf}`);
        this.line(this.storeInto(s.buf, t, s.index, () => this.expr(s.value).s));
        return;
      }
      case "sstore": {
        const t = this.sharedType.get(s.arr) ?? this.fail(`store to unknown shared array ${s.arr}`);
        if (s.value.t !== t) this.fail(`store of a ${s.value.t} value into ${t} shared array ${s.arr}`);
        this.line(`${this.sharedName(s.arr)}[${this.index(s.index)}] = ${this.expr(s.value).s};`);
        return;
      }
      case "for": {
        const v = this.local(s.v);
        for (const e of [s.from, s.to, s.step]) if (e.t !== "i32") this.fail(`for bound of type ${e.t}`);
        const to = this.expr(s.to);
        const head = `for (${this.loopVariable(v)} = ${this.expr(s.from).s}; ${v} < ${
          paren(to, to.p <= REL)
        }`;
        this.braced(`${head}; ${v} += ${this.expr(s.step).s})`, () => this.block(s.body));
        return;
      }
      case "if":
        if (s.cond.t !== "bool") this.fail(`if condition is ${s.cond.t}, not bool`);
        this.line(`if (${this.expr(s.cond).s}) {`);
        this.indented(() => this.block(s.then));
        if (s.else && s.else.length) {
          this.line("} else {");
          this.indented(() => this.block(s.else!));
        }
        this.line("}");
        return;
      case "barrier":
        this.line(this.barrier);
        return;
      case "comment":
        for (const text of s.text.split("\n")) this.line(`// ${text}`);
        return;
    }
  }

  /** Element `index` of binding `buf` read; a target that routes accesses (WGSL ranges) overrides it. */
  protected loadFrom(buf: string, t: KType, index: KExpr): string {
    return `${this.bufferAccess(buf, t, true)}[${this.index(index)}]`;
  }

  /** The statement storing `value` at element `index` of binding `buf` (the index is spelled first). */
  protected storeInto(buf: string, t: KType, index: KExpr, value: () => string): string {
    const at = `${this.bufferAccess(buf, t, false)}[${this.index(index)}]`;
    return `${at} = ${value()};`;
  }

  protected index(e: KExpr): string {
    if (e.t !== "i32" && e.t !== "u32") this.fail(`index of type ${e.t}`);
    return this.expr(e).s;
  }

  protected expr(e: KExpr): Spelled {
    switch (e.k) {
      case "lit":
        if (isVector(e.t)) this.fail(`literal of vector type ${e.t} (splat a scalar literal)`);
        return this.literal(e.v, e.t);
      case "ref":
        return atom(this.local(e.name));
      case "id":
        return atom(e.which);
      case "load": {
        const t = this.bindingType.get(e.buf) ?? this.fail(`load from unknown binding ${e.buf}`);
        if (t !== e.t) this.fail(`load of ${e.t} from ${t} binding ${e.buf}`);
        return atom(this.loadFrom(e.buf, t, e.index));
      }
      case "sload": {
        const t = this.sharedType.get(e.arr) ?? this.fail(`load from unknown shared array ${e.arr}`);
        if (t !== e.t) this.fail(`load of ${e.t} from ${t} shared array ${e.arr}`);
        return atom(`${this.sharedName(e.arr)}[${this.index(e.index)}]`);
      }
      case "un": {
        const a = this.expr(e.a);
        if (!accepts(K_UNARY[e.op].operands, laneType(e.a.t))) this.fail(`${e.op} of a ${e.a.t} value`);
        return this.unary(e.op, a, e.a.t);
      }
      case "bin":
        return this.binary(e);
      case "select": {
        if (laneType(e.cond.t) !== "bool") this.fail(`select on a ${e.cond.t} condition`);
        return this.select(this.expr(e.cond), this.expr(e.a), this.expr(e.b));
      }
      case "cast":
        return this.cast(this.expr(e.a), e.a.t, e.t);
      case "splat":
        return this.splat(e);
      case "vec": {
        const t = laneType(e.t);
        if (e.parts.length !== 4 || e.parts.some((p) => p.t !== t)) this.fail(`malformed ${e.t} constructor`);
        return this.vector(e.t, e.parts.map((p) => this.expr(p).s));
      }
      case "lane": {
        if (!isVector(e.a.t) || !(e.lane >= 0 && e.lane < 4)) this.fail(`lane ${e.lane} of a ${e.a.t} value`);
        const a = this.expr(e.a);
        return atom(`${paren(a, a.p < ATOM)}.${"xyzw"[e.lane]}`);
      }
      case "philox": {
        const fn = e.t === "v4f32" ? "bf_philox4" : "bf_philox";
        this.use(fn);
        const u = (x: KExpr) => this.cast(this.expr(x), x.t, "u32").s;
        return atom(`${fn}(${u(e.seed)}, ${u(e.step)}, ${e.stream >>> 0}u, ${u(e.index)})`);
      }
    }
  }

  private binary(e: Extract<KExpr, { k: "bin" }>): Spelled {
    const t = e.a.t;
    if (e.b.t !== t) this.fail(`${e.op} of ${t} and ${e.b.t}`);
    if (!accepts(K_BINARY[e.op].operands, laneType(t))) this.fail(`${e.op} of ${t} values`);
    const [a, b] = this.operands(e);
    const c = C_BINARY[e.op];
    switch (c.kind) {
      case "call":
        return this.rounded(atom(`${this.minMax(e.op as "max" | "min", t)}(${a.s}, ${b.s})`), t);
      case "logic": {
        if (t === "bool") {
          const [sym, p] = c.bool;
          const left = paren(a, a.p < REL && a.op !== sym);
          return { s: `${left} ${sym} ${paren(b, b.p < REL)}`, p, op: sym };
        }
        return { s: `${paren(a, a.p < UNARY)} ${c.bits} ${paren(b, b.p < UNARY)}`, p: BIT, op: c.bits };
      }
      case "infix": {
        if (c.p === REL) {
          return { s: `${paren(a, a.p <= REL)} ${c.sym} ${paren(b, b.p <= REL)}`, p: REL, op: c.sym };
        }
        // Arithmetic is left-associative: a same-level right operand keeps its parentheses (float addition
        // is not associative), and so does a negated one, for legibility.
        const left = paren(a, a.p < c.p);
        const right = paren(b, b.p <= c.p || b.p === UNARY);
        return this.rounded({ s: `${left} ${c.sym} ${right}`, p: c.p, op: c.sym }, t);
      }
    }
  }
}
