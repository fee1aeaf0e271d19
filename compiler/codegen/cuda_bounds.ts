/**
 * CUDA legalize rule "safe loads": every buffer and shared-array load whose index the kernel IR cannot
 * prove in range gets its index clamped to [0, size - 1]. WebGPU's robust buffer access makes such loads
 * harmless there and CUDA has none; a clamped load reads a real element whose value only reaches discarded
 * lanes. Stores are not rewritten but reported (`unprovenStores`). The proof is an interval analysis (why
 * and how: DESIGN.md, notes: compiler/codegen/cuda_bounds.ts).
 */
import { bin, i32, isVector, type Kernel, type KExpr, type KStmt, laneType, splat } from "../kernel_ir/ir.ts";
import {
  fits,
  I32_MAX,
  isEmpty,
  join,
  meet,
  type Range,
  range,
  rangeOfBinary,
  TOP,
} from "../kernel_ir/index_facts.ts";
import { mapExpr, visitStmts } from "../kernel_ir/walk.ts";

export interface SafeLoads {
  readonly kernel: Kernel;
  /** Loads (buffer or shared) whose index got clamped. */
  readonly clampedLoads: number;
  /** Stores whose index the analysis could not prove in range (left as they are). */
  readonly unprovenStores: readonly string[];
}

/**
 * The values a loop variable takes in `for v = from; v < to; v += step`: from the smallest start to the
 * last value below the largest bound; with constant start and step, exactly the last one it reaches.
 */
function loopRange(from: Range, to: Range, step: Range): Range {
  if (!(step.lo >= 1) || isEmpty(from) || isEmpty(to)) return isEmpty(from) || isEmpty(to) ? from : TOP;
  if (from.lo === from.hi && step.lo === step.hi && Number.isFinite(to.hi)) {
    return range(from.lo, from.lo + Math.floor((to.hi - 1 - from.lo) / step.lo) * step.lo);
  }
  return range(from.lo, to.hi - 1);
}

function findShadowed(body: readonly KStmt[], outer: readonly Set<string>[], out: Set<string>): void {
  const here = new Set<string>();
  const scopes = [...outer, here];
  const declare = (name: string) => {
    if (scopes.some((sc) => sc.has(name))) out.add(name);
    here.add(name);
  };
  for (const s of body) {
    if (s.k === "let") declare(s.name);
    if (s.k === "wg_reduce") declare(s.out);
    if (s.k === "for") {
      if (scopes.some((sc) => sc.has(s.v))) out.add(s.v);
      findShadowed(s.body, [...scopes, new Set([s.v])], out);
    }
    if (s.k === "if") {
      findShadowed(s.then, scopes, out);
      if (s.else) findShadowed(s.else, scopes, out);
    }
  }
}

type Def = { readonly kind: "expr"; readonly e: KExpr } | { readonly kind: "range"; readonly r: Range };

/** The rule: clamps unproven load indices; see the file comment. */
export function clampUnprovenLoads(k: Kernel): SafeLoads {
  const a = new Analysis(k);
  const body = a.block(k.body);
  return { kernel: { ...k, body }, clampedLoads: a.clamped, unprovenStores: a.unproven };
}

class Analysis {
  clamped = 0;
  readonly unproven: string[] = [];
  /** Scoped definitions of locals (innermost last). */
  private readonly scopes: Map<string, Def>[] = [new Map()];
  /**
   * Scoped facts: refined ranges under the enclosing conditions, keyed by a local's definition (so a
   * shadowing local of the same name is not refined by mistake) or by "#lid", "#wg", "#gid".
   */
  private readonly facts: Map<Def | string, Range>[] = [new Map()];
  /** Ranges of expression nodes under the current facts; cleared whenever the facts change. */
  private cache = new Map<KExpr, Range>();
  private readonly sizes = new Map<string, number>();

  /** Names some `set` assigns: a loop variable among them is unknown (the IR never does this today). */
  private readonly assigned = new Set<string>();

  /**
   * Names declared again while an outer declaration is visible. A definition is re-evaluated where it is
   * used, and there a name inside it could mean the inner local; such names are simply unknown.
   */
  private readonly shadowed = new Set<string>();

  constructor(k: Kernel) {
    visitStmts(k.body, (s) => {
      if (s.k === "set") this.assigned.add(s.name);
    });
    findShadowed(k.body, [], this.shadowed);
    for (const b of k.bindings) this.sizes.set(b.name, b.vector ? b.elements / b.vector : b.elements);
    for (const s of k.shared) this.sizes.set(s.name, s.size);
    const ws = k.workgroupSize, n = k.workgroups;
    this.facts[0].set("#lid", range(0, ws - 1));
    this.facts[0].set("#wg", range(0, Math.max(0, n - 1)));
    this.facts[0].set("#gid", range(0, Math.max(0, n * ws - 1)));
  }

  // ---- statements ---------------------------------------------------------------------------------

  block(body: readonly KStmt[]): KStmt[] {
    this.scopes.push(new Map());
    const out = body.map((s) => this.stmt(s));
    this.scopes.pop();
    return out;
  }

  private stmt(s: KStmt): KStmt {
    switch (s.k) {
      case "let": {
        const init = this.safe(s.init);
        this.define(s.name, s.mutable ? { kind: "range", r: TOP } : { kind: "expr", e: init });
        return { ...s, init };
      }
      case "set":
        return { ...s, value: this.safe(s.value) };
      case "store":
      case "sstore": {
        const buf = s.k === "store" ? s.buf : s.arr;
        if (!this.inRange(s.index, buf)) this.unproven.push(`${s.k} ${buf}: ${this.describe(s.index, buf)}`);
        return { ...s, index: this.safe(s.index), value: this.safe(s.value) };
      }
      case "for": {
        const from = this.safe(s.from), to = this.safe(s.to), step = this.safe(s.step);
        const r = this.assigned.has(s.v) ? TOP : loopRange(this.of(from), this.of(to), this.of(step));
        this.scopes.push(new Map([[s.v, { kind: "range", r }]]));
        this.cache = new Map();
        const body = this.block(s.body);
        this.scopes.pop();
        this.cache = new Map();
        return { ...s, from, to, step, body };
      }
      case "if": {
        const cond = this.safe(s.cond);
        const then = this.under(cond, true, s.then);
        if (!s.else) return { ...s, cond, then };
        return { ...s, cond, then, else: this.under(cond, false, s.else) };
      }
      case "wg_reduce":
        this.define(s.out, { kind: "range", r: TOP });
        return { ...s, value: this.safe(s.value) };
      case "barrier":
      case "comment":
        return s;
    }
  }

  /** A branch body analysed under the facts that `cond` is `holds`. */
  private under(cond: KExpr, holds: boolean, body: readonly KStmt[]): KStmt[] {
    const facts = new Map<Def | string, Range>();
    this.facts.push(facts);
    this.assume(cond, holds, facts, 0);
    // Ranges computed while collecting the facts predate them.
    this.cache = new Map();
    const out = this.block(body);
    this.facts.pop();
    this.cache = new Map();
    return out;
  }

  private define(name: string, d: Def): void {
    this.scopes[this.scopes.length - 1].set(name, d);
  }

  private lookup(name: string): Def | undefined {
    if (this.shadowed.has(name)) return undefined;
    for (let i = this.scopes.length - 1; i >= 0; i--) {
      const d = this.scopes[i].get(name);
      if (d) return d;
    }
    return undefined;
  }

  private fact(key: Def | string): Range | undefined {
    let r: Range | undefined;
    for (const f of this.facts) {
      const have = f.get(key);
      if (have) r = r ? meet(r, have) : have;
    }
    return r;
  }

  // ---- facts from conditions ----------------------------------------------------------------------

  /** Records what `cond == holds` says about locals and ids (conjunctions when true, negations of one
   * comparison when false). `depth` bounds the chase through bool locals. */
  private assume(cond: KExpr, holds: boolean, into: Map<Def | string, Range>, depth: number): void {
    if (depth > 8) return;
    if (cond.k === "ref") {
      const d = this.lookup(cond.name);
      if (d?.kind === "expr") this.assume(d.e, holds, into, depth + 1);
      return;
    }
    if (cond.k === "un" && cond.op === "not") return this.assume(cond.a, !holds, into, depth + 1);
    if (cond.k !== "bin") return;
    if (cond.op === "and" && holds) {
      this.assume(cond.a, true, into, depth + 1);
      this.assume(cond.b, true, into, depth + 1);
      return;
    }
    if (cond.op === "or" && !holds) {
      this.assume(cond.a, false, into, depth + 1);
      this.assume(cond.b, false, into, depth + 1);
      return;
    }
    const NEGATE: Record<string, string> = { lt: "ge", le: "gt", gt: "le", ge: "lt" };
    const SWAP: Record<string, string> = { lt: "gt", le: "ge", gt: "lt", ge: "le" };
    let op: string | undefined = holds ? cond.op : NEGATE[cond.op];
    if (op === undefined || !SWAP[op] || isVector(cond.a.t)) return;
    const limitOf = (op: string, bound: Range) =>
      op === "lt"
        ? range(-Infinity, bound.hi - 1)
        : op === "le"
        ? range(-Infinity, bound.hi)
        : op === "gt"
        ? range(bound.lo + 1, Infinity)
        : range(bound.lo, Infinity);
    this.refine(cond.a, limitOf(op, this.of(cond.b)), into, depth);
    op = SWAP[op];
    this.refine(cond.b, limitOf(op, this.of(cond.a)), into, depth);
  }

  /**
   * Records that `x` lies in `limit`: on a local or an id directly, and back through the definition of a
   * local to what it is computed from (`grp = lid / 16` and `grp < 8` give `lid < 128`) where the step
   * is exact: a quotient by a positive constant of a nonnegative value, or a sum, difference or product
   * with a constant that cannot have wrapped.
   */
  private refine(x: KExpr, limit: Range, into: Map<Def | string, Range>, depth: number): void {
    if (depth > 8 || isVector(x.t)) return;
    if (x.k === "id") return this.narrow(`#${x.which}`, limit, into);
    if (x.k === "ref") {
      const def = this.lookup(x.name);
      // Mutable locals may change after the test; immutable ones and loop variables (only the loop's own
      // increment changes them, after the body) keep the fact for the whole branch.
      if (!def || (def.kind === "range" && def.r === TOP)) return;
      this.narrow(def, limit, into);
      if (def.kind === "expr") this.refine(def.e, limit, into, depth + 1);
      return;
    }
    if (x.k !== "bin") return;
    const own = this.of(x);
    if (!Number.isFinite(own.lo) || !Number.isFinite(own.hi)) return; // may have wrapped
    const c = x.b.k === "lit"
      ? x.b.v
      : x.a.k === "lit" && (x.op === "add" || x.op === "mul")
      ? x.a.v
      : undefined;
    const y = x.b.k === "lit" ? x.a : x.b;
    if (c === undefined || y.k === "lit") return;
    const shifted = (d: number) => range(limit.lo + d, limit.hi + d);
    if (x.op === "add") this.refine(y, shifted(-c), into, depth + 1);
    else if (x.op === "sub" && x.b.k === "lit") this.refine(y, shifted(c), into, depth + 1);
    else if (x.op === "mul" && c > 0) {
      this.refine(y, range(Math.ceil(limit.lo / c), Math.floor(limit.hi / c)), into, depth + 1);
    } else if (x.op === "div" && x.b.k === "lit" && c > 0 && this.of(y).lo >= 0) {
      this.refine(y, range(limit.lo * c, limit.hi * c + c - 1), into, depth + 1);
    }
  }

  private narrow(key: Def | string, limit: Range, into: Map<Def | string, Range>): void {
    const have = into.get(key);
    into.set(key, have ? meet(have, limit) : limit);
  }

  // ---- ranges -------------------------------------------------------------------------------------

  /** The range of an integer expression (all lanes of a vector); TOP for anything else. */
  of(e: KExpr): Range {
    const have = this.cache.get(e);
    if (have) return have;
    const r = this.compute(e);
    this.cache.set(e, r);
    return r;
  }

  private compute(e: KExpr): Range {
    const t = laneType(e.t);
    if (t !== "i32" && t !== "u32") return TOP;
    switch (e.k) {
      case "lit":
        return range(e.v, e.v);
      case "id":
        return this.fact(`#${e.which}`) ?? TOP;
      case "ref": {
        const d = this.lookup(e.name);
        if (d === undefined) return TOP;
        const base = d.kind === "range" ? d.r : this.of(d.e);
        const f = this.fact(d);
        return f ? meet(base, f) : base;
      }
      case "lane":
      case "splat":
        return this.of(e.a);
      case "vec":
        return e.parts.map((p) => this.of(p)).reduce(join);
      case "select":
        return join(this.of(e.a), this.of(e.b));
      case "cast": {
        const a = this.of(e.a);
        const from = laneType(e.a.t);
        if (from === "bool") return range(0, 1);
        if (from === "i32" || from === "u32") return a.lo >= 0 && a.hi <= I32_MAX ? a : fits(a, t);
        return TOP;
      }
      case "bin": {
        const a = this.of(e.a), b = this.of(e.b);
        if (isEmpty(a)) return a;
        if (isEmpty(b)) return b;
        return rangeOfBinary(e.op, t, a, b);
      }
      default:
        return TOP;
    }
  }

  // ---- the rewrite --------------------------------------------------------------------------------

  private inRange(index: KExpr, buf: string): boolean {
    const n = this.sizes.get(buf);
    if (n === undefined) return false;
    const r = this.of(index);
    return isEmpty(r) || (r.lo >= 0 && r.hi <= n - 1);
  }

  /** `e` with the index of every unproven load inside it clamped. */
  private safe(e: KExpr): KExpr {
    return mapExpr(e, (x) => {
      if (x.k !== "load" && x.k !== "sload") return x;
      const buf = x.k === "load" ? x.buf : x.arr;
      if (this.inRange(x.index, buf)) return x;
      const n = this.sizes.get(buf);
      if (n === undefined) return x; // unknown names are the emitter's error to report
      this.clamped++;
      const lit = (v: number) => (isVector(x.index.t) ? splat(i32(v)) : i32(v));
      const index = bin("min", bin("max", x.index, lit(0)), lit(Math.max(0, n - 1)));
      return { ...x, index };
    });
  }

  private describe(e: KExpr, buf: string): string {
    const r = this.of(e);
    return `index in [${r.lo}, ${r.hi}], size ${this.sizes.get(buf)}`;
  }
}
