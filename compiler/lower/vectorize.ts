/**
 * Vectorizes loop kernels four wide: each thread handles four consecutive elements, reading and writing
 * them with vec4 loads and stores where the index math proves that safe. A kernel-IR to kernel-IR rewrite
 * run after lowering (compiler/stages/lower.ts); a kernel it cannot prove comes back unchanged, with the
 * reason (`vectorize(k).reason`). Each integer expression is uniform, a sequence or a vector over the four
 * lanes (the classes, their proof and what is refused: DESIGN.md, notes: compiler/lower/vectorize.ts).
 */
import {
  add,
  bin,
  cast,
  div,
  gid,
  i32,
  if_,
  isVector,
  type Kernel,
  type KExpr,
  type KStmt,
  laneOf,
  let_,
  lit,
  load,
  lt,
  mod,
  mul,
  ref,
  splat,
  store,
  sub,
  vec,
  vectorOf,
} from "../kernel_ir/ir.ts";
import { type Divisor, divisorOfBinary, gcd, NO_DIVISOR } from "../kernel_ir/index_facts.ts";
import { visitExprs } from "../kernel_ir/walk.ts";
import { exprKey } from "./index_math.ts";

/** Elements per thread after vectorization. */
export const VECTOR_WIDTH = 4;

export interface VectorizeResult {
  /** The vectorized kernel, or the input itself when `reason` is set. */
  readonly kernel: Kernel;
  /** Why the kernel stays scalar (absent when it was vectorized). */
  readonly reason?: string;
}

/** The kernel vectorized four wide, or `k` itself when that is not possible or not useful. */
export function vectorizeLoop(k: Kernel): Kernel {
  return vectorize(k).kernel;
}

/** Why `vectorizeLoop` leaves `k` scalar; undefined when it vectorizes it. */
export function whyNotVectorized(k: Kernel): string | undefined {
  return vectorize(k).reason;
}

class NotVectorizable extends Error {}

function refuse(reason: string): never {
  throw new NotVectorizable(reason);
}

export function vectorize(k: Kernel): VectorizeResult {
  try {
    return { kernel: vectorizeOrThrow(k) };
  } catch (e) {
    if (e instanceof NotVectorizable) return { kernel: k, reason: e.message };
    throw e;
  }
}

function vectorizeOrThrow(k: Kernel): Kernel {
  if (k.kind !== "loop") refuse(`a ${k.kind} kernel (only loop kernels are vectorized)`);
  if (isVectorized(k)) refuse("already vectorized");
  const n = guardedCount(k);
  if (n % VECTOR_WIDTH !== 0) refuse(`${n} elements, not a multiple of ${VECTOR_WIDTH}`);
  for (const b of k.bindings) {
    if (b.t === "bf16") refuse(`binding ${b.name} is bf16 (no bf16 vectors in the kernel IR)`);
  }
  const inner = (k.body[0] as Extract<KStmt, { k: "if" }>).then;

  // Pass 1 records how each binding is accessed; pass 2 rewrites with the vec4 bindings decided.
  const probe = new Rewriter(new Set(k.bindings.map((b) => b.name)));
  probe.body(inner);
  const vectorBindings = new Set(
    k.bindings
      .filter((b) => b.elements % VECTOR_WIDTH === 0 && probe.onlySequence(b.name))
      .map((b) => b.name),
  );
  if (vectorBindings.size === 0 && !probe.blockPhilox) {
    refuse("no binding is accessed four consecutive elements at a time (nothing to gain)");
  }
  const rw = new Rewriter(vectorBindings);
  const body = withoutDeadLets(rw.body(inner));
  const quads = n / VECTOR_WIDTH;
  const vectorList = k.bindings.flatMap((b, i) => (vectorBindings.has(b.name) ? [String(i)] : []));
  return {
    ...k,
    bindings: k.bindings.map((b) => (vectorBindings.has(b.name) ? { ...b, vector: VECTOR_WIDTH } : b)),
    workgroups: Math.max(1, Math.ceil(quads / k.workgroupSize)),
    body: [if_(lt(gid, i32(quads)), body)],
    about: [
      ...k.about,
      `vectorized: ${VECTOR_WIDTH} consecutive elements per thread` +
      (vectorList.length ? `; vec${VECTOR_WIDTH} bindings ${vectorList.join(", ")}` : ""),
    ],
  };
}

/** N of a body `if (gid < N) { ... }` (the only shape lowerLoop emits). */
function guardedCount(k: Kernel): number {
  const s = k.body.length === 1 ? k.body[0] : undefined;
  const c = s?.k === "if" && !s.else ? s.cond : undefined;
  if (
    c?.k !== "bin" || c.op !== "lt" || c.a.k !== "id" || c.a.which !== "gid" || c.b.k !== "lit" ||
    c.b.t !== "i32"
  ) {
    return refuse("the body is not `if (gid < N) { ... }`");
  }
  if (k.workgroups * k.workgroupSize < c.b.v) refuse(`${c.b.v} elements but fewer threads`);
  return c.b.v;
}

// ---- the lane classification ------------------------------------------------------------------------

type Int = "i32" | "u32";

/** What an expression of the scalar kernel is across the four lanes, with its rewritten form. */
type Lanes =
  /** The same in every lane; `e` is a scalar expression of the new gid. */
  | { readonly k: "uniform"; readonly e: KExpr }
  /** Lane c holds 4q + c; `local`, when set, is a local holding the vector form. */
  | { readonly k: "sequence"; readonly t: Int; readonly q: KExpr; readonly local?: KExpr }
  /** A vector-typed expression, lane by lane. */
  | { readonly k: "vector"; readonly e: KExpr };

const uniform = (e: KExpr): Lanes => ({ k: "uniform", e });
const vector = (e: KExpr): Lanes => ({ k: "vector", e });

const isInt = (t: string): t is Int => t === "i32" || t === "u32";
const positiveLit = (e: KExpr): number | undefined =>
  e.k === "lit" && isInt(e.t) && Number.isInteger(e.v) && e.v > 0 ? e.v : undefined;

type Access = "sequence" | "uniform" | "gather";

class Rewriter {
  private readonly lanes = new Map<string, Lanes>();
  private readonly facts = new Map<string, Divisor>();
  private readonly access = new Map<string, Set<Access>>();
  private readonly out: KStmt[] = [];
  /** Locals this pass declared, by expression (the same gather index is computed once). */
  private readonly locals = new Map<string, KExpr>();
  private tmp = 0;
  private names = new Set<string>();
  /** Set when a Philox draw became one block for the four lanes. */
  blockPhilox = false;

  constructor(private readonly vectorBindings: ReadonlySet<string>) {}

  onlySequence(buf: string): boolean {
    const a = this.access.get(buf);
    return a !== undefined && a.size === 1 && a.has("sequence");
  }

  body(stmts: readonly KStmt[]): KStmt[] {
    for (const s of stmts) if (s.k === "let") this.names.add(s.name);
    for (const s of stmts) this.stmt(s);
    return this.out;
  }

  private stmt(s: KStmt): void {
    switch (s.k) {
      case "comment":
        this.out.push(s);
        return;
      case "let": {
        if (s.mutable) refuse(`mutable local ${s.name}`);
        const v = this.classify(s.init);
        if (v.k === "uniform") {
          this.out.push(let_(s.name, v.e));
          this.lanes.set(s.name, uniform(ref(s.name, v.e.t)));
          if (isInt(v.e.t)) this.facts.set(s.name, this.factsOf(v.e));
        } else if (v.k === "vector") {
          this.out.push(let_(s.name, v.e));
          this.lanes.set(s.name, vector(ref(s.name, v.e.t)));
        } else {
          // Index math keeps using q; the vector form is declared for other uses (dropped if unused).
          const e = sequenceVector(v);
          this.out.push(let_(s.name, e));
          this.lanes.set(s.name, { ...v, local: ref(s.name, e.t) });
        }
        return;
      }
      case "store": {
        const at = this.classify(s.index);
        if (at.k !== "sequence") refuse(`the store to ${s.buf} is not at four consecutive elements`);
        const q = at.q;
        this.note(s.buf, "sequence");
        const value = this.toVector(this.classify(s.value));
        if (this.vectorBindings.has(s.buf)) {
          this.out.push(store(s.buf, q, value));
        } else {
          const v = this.local(value, "vs");
          const first = this.local(mul(q, i32(VECTOR_WIDTH)), "ix");
          for (let c = 0; c < VECTOR_WIDTH; c++) {
            this.out.push(store(s.buf, add(first, i32(c)), laneOf(v, c)));
          }
        }
        return;
      }
      default:
        return refuse(`a ${s.k} statement inside the guard`);
    }
  }

  private note(buf: string, a: Access): void {
    let set = this.access.get(buf);
    if (!set) this.access.set(buf, set = new Set());
    set.add(a);
  }

  /** `e` itself when trivial, else a local holding it (one per distinct expression). */
  private local(e: KExpr, prefix: string): KExpr {
    if (e.k === "ref" || e.k === "lit" || e.k === "id") return e;
    const key = exprKey(e);
    const have = this.locals.get(key);
    if (have) return have;
    let name: string;
    do name = `${prefix}${this.tmp++}`; while (this.names.has(name));
    this.names.add(name);
    this.out.push(let_(name, e));
    const r = ref(name, e.t);
    this.locals.set(key, r);
    return r;
  }

  /** The four lanes of `v` as one vector expression. */
  private toVector(v: Lanes): KExpr {
    switch (v.k) {
      case "vector":
        return v.e;
      case "uniform":
        if (vectorOf(v.e.t) === undefined) refuse(`no vector type for ${v.e.t}`);
        return splat(v.e);
      case "sequence":
        return v.local ?? this.local(sequenceVector(v), "ix");
    }
  }

  private classify(e: KExpr): Lanes {
    switch (e.k) {
      case "lit":
        return uniform(e);
      case "ref":
        return this.lanes.get(e.name) ?? refuse(`reads ${e.name}, which is declared outside the guard`);
      case "id":
        if (e.which !== "gid") refuse(`uses the thread id ${e.which}`);
        return { k: "sequence", t: "i32", q: gid };
      case "load":
        return this.load(e);
      case "un": {
        const a = this.classify(e.a);
        if (a.k === "uniform") return uniform({ ...e, a: a.e });
        const x = this.toVector(a);
        return vector({ ...e, t: x.t, a: x });
      }
      case "bin":
        return this.binary(e);
      case "select": {
        const [c, a, b] = [this.classify(e.cond), this.classify(e.a), this.classify(e.b)];
        if (c.k === "uniform" && a.k === "uniform" && b.k === "uniform") {
          return uniform({ ...e, cond: c.e, a: a.e, b: b.e });
        }
        const [cv, av, bv] = [this.toVector(c), this.toVector(a), this.toVector(b)];
        return vector({ ...e, t: av.t, cond: cv, a: av, b: bv });
      }
      case "cast": {
        const a = this.classify(e.a);
        if (a.k === "uniform") return uniform(cast(a.e, e.t));
        if (a.k === "sequence" && isInt(e.t) && this.factsOf(a.q).nonneg) {
          return { k: "sequence", t: e.t, q: cast(a.q, e.t) };
        }
        const t = vectorOf(e.t) ?? refuse(`no vector type for ${e.t}`);
        return vector(cast(this.toVector(a), t));
      }
      case "philox":
        return this.philox(e);
      case "sload":
        return refuse("reads workgroup memory");
      case "splat":
      case "vec":
      case "lane":
        return refuse("already vectorized");
    }
  }

  private load(e: Extract<KExpr, { k: "load" }>): Lanes {
    const at = this.classify(e.index);
    if (at.k === "uniform") {
      this.note(e.buf, "uniform");
      return uniform(load(e.buf, at.e, e.t));
    }
    const t = vectorOf(e.t) ?? refuse(`no vector type for ${e.t}`);
    if (at.k === "sequence") {
      this.note(e.buf, "sequence");
      if (this.vectorBindings.has(e.buf)) return vector(load(e.buf, at.q, t));
      const first = this.local(mul(at.q, i32(VECTOR_WIDTH)), "ix");
      return vector(vec([0, 1, 2, 3].map((c) => load(e.buf, add(first, i32(c)), e.t))));
    }
    // A gather: four scalar loads at the lanes of the index vector.
    this.note(e.buf, "gather");
    const ix = this.local(this.toVector(at), "ix");
    return vector(vec([0, 1, 2, 3].map((c) => load(e.buf, laneOf(ix, c), e.t))));
  }

  private binary(e: Extract<KExpr, { k: "bin" }>): Lanes {
    const a = this.classify(e.a), b = this.classify(e.b);
    if (a.k === "uniform" && b.k === "uniform") return uniform(bin(e.op, a.e, b.e));
    const s = isInt(e.t) ? this.sequenceArith(e.op, a, b) : undefined;
    if (s) return s;
    return vector(bin(e.op, this.toVector(a), this.toVector(b)));
  }

  /** Integer arithmetic on a sequence that stays a sequence or becomes uniform (see the file comment). */
  private sequenceArith(op: string, a: Lanes, b: Lanes): Lanes | undefined {
    // uniform + sequence (a row base plus a column), in the order written
    if (a.k === "uniform" && b.k === "sequence" && op === "add") {
      if (this.factsOf(a.e).d % VECTOR_WIDTH !== 0) return undefined;
      return { k: "sequence", t: b.t, q: add(this.divExact(a.e, VECTOR_WIDTH), b.q) };
    }
    if (a.k !== "sequence" || b.k !== "uniform") return undefined;
    const q = a.q;
    const u = b.e;
    const k = positiveLit(u);
    const nonneg = this.factsOf(q).nonneg;
    switch (op) {
      case "add":
      case "sub": {
        if (this.factsOf(u).d % VECTOR_WIDTH !== 0) return undefined;
        const u4 = this.divExact(u, VECTOR_WIDTH);
        return { k: "sequence", t: a.t, q: op === "add" ? add(q, u4) : sub(q, u4) };
      }
      case "div":
        if (k === undefined || k % VECTOR_WIDTH !== 0 || !nonneg) return undefined;
        return uniform(div(q, lit(k / VECTOR_WIDTH, a.t)));
      case "mod":
        if (k === undefined || k % VECTOR_WIDTH !== 0 || !nonneg) return undefined;
        return { k: "sequence", t: a.t, q: mod(q, lit(k / VECTOR_WIDTH, a.t)) };
      default:
        return undefined;
    }
  }

  private philox(e: Extract<KExpr, { k: "philox" }>): Lanes {
    const seed = this.classify(e.seed), step = this.classify(e.step);
    if (seed.k !== "uniform" || step.k !== "uniform") refuse("a Philox key that differs across lanes");
    const key = { seed: seed.e, step: step.e };
    const at = this.classify(e.index);
    if (at.k === "uniform") return uniform({ ...e, ...key, index: at.e });
    if (at.k === "sequence" && this.factsOf(at.q).nonneg) {
      // Elements 4q..4q+3 are the four words of Philox block q.
      this.blockPhilox = true;
      const index = mul(cast(at.q, "u32"), lit(VECTOR_WIDTH, "u32"));
      return vector({ ...e, ...key, t: "v4f32", index });
    }
    const ix = this.local(cast(this.toVector(at), "v4u32"), "ix");
    return vector(vec([0, 1, 2, 3].map((c) => ({ ...e, ...key, index: laneOf(ix, c) }))));
  }

  /** Divisibility and sign of a scalar integer expression of the new gid. */
  private factsOf(e: KExpr): Divisor {
    switch (e.k) {
      case "lit":
        return Number.isInteger(e.v) ? { d: Math.abs(e.v), nonneg: e.v >= 0 } : NO_DIVISOR;
      case "ref":
        return this.facts.get(e.name) ?? NO_DIVISOR;
      case "id":
        return { d: 1, nonneg: true };
      case "cast": {
        const f = this.factsOf(e.a);
        return isInt(e.t) && isInt(e.a.t) && f.nonneg ? f : NO_DIVISOR;
      }
      case "select": {
        const a = this.factsOf(e.a), b = this.factsOf(e.b);
        return { d: gcd(a.d, b.d), nonneg: a.nonneg && b.nonneg };
      }
      case "bin":
        if (!isInt(e.t)) return NO_DIVISOR;
        return divisorOfBinary(e.op, this.factsOf(e.a), this.factsOf(e.b), positiveLit(e.b));
      default:
        return NO_DIVISOR;
    }
  }

  /** e / m for an `e` known to be a multiple of m, pushed into products and sums where that reads well. */
  private divExact(e: KExpr, m: number): KExpr {
    const divisible = (x: KExpr) => this.factsOf(x).d % m === 0;
    if (e.k === "lit") return lit(e.v / m, e.t);
    if (e.k === "bin" && e.op === "mul") {
      if (divisible(e.b)) return mul(e.a, this.divExact(e.b, m));
      if (divisible(e.a)) return mul(this.divExact(e.a, m), e.b);
    }
    if (e.k === "bin" && (e.op === "add" || e.op === "sub") && divisible(e.a) && divisible(e.b)) {
      return bin(e.op, this.divExact(e.a, m), this.divExact(e.b, m));
    }
    return div(e, lit(m, e.t)); // exact: truncating division of a multiple of m
  }
}

/** The element indices of a sequence's four lanes: 4q + (0, 1, 2, 3). */
function sequenceVector(v: Extract<Lanes, { k: "sequence" }>): KExpr {
  const lanes = vec([0, 1, 2, 3].map((c) => lit(c, v.t)));
  return add(splat(mul(v.q, lit(VECTOR_WIDTH, v.t))), lanes);
}

/** Drops locals nothing reads (the vector forms of sequences that only served as indices). */
function withoutDeadLets(body: readonly KStmt[]): KStmt[] {
  let stmts = [...body];
  for (;;) {
    const used = new Set<string>();
    visitExprs(stmts, (e) => {
      if (e.k === "ref") used.add(e.name);
    });
    const kept = stmts.filter((s) => s.k !== "let" || used.has(s.name));
    if (kept.length === stmts.length) return kept;
    stmts = kept;
  }
}

/** True when `k` has vector bindings or vector values (it went through `vectorizeLoop`). */
export function isVectorized(k: Kernel): boolean {
  if (k.bindings.some((b) => b.vector)) return true;
  let found = false;
  visitExprs(k.body, (e) => (found ||= isVector(e.t)));
  return found;
}
