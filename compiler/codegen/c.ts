/**
 * The C spelling of the kernel IR, for the CPU backend (runtime/cpu/): each kernel becomes
 * `void bf_kernel(void* const* bf_args)`, one pointer per binding in binding order, compiled at run time
 * with `cc -O3 -march=native -fopenmp-simd` into a shared library. Workgroups are a loop the thread pool
 * runs in parallel; a workgroup's threads are an inner loop, split at each barrier into phases (thread loop
 * fission) that the C compiler vectorizes (DESIGN.md, notes: compiler/codegen/c.ts).
 */
import type { TargetKernel } from "../../plan/plan.ts";
import { isVector, type Kernel, type KExpr, type KStmt, type KType, type KUnOp } from "../kernel_ir/ir.ts";
import { forEachExpr, stmtExprs, visitExprs, visitStmts } from "../kernel_ir/walk.ts";
import {
  atom,
  call,
  type Legal,
  negate,
  not,
  paren,
  reciprocal,
  REL,
  type Spelled,
  UNARY,
} from "./c_family.ts";
import { type CHelper, cPrelude } from "./c_prelude.ts";
import {
  HalfInF32Speller,
  isFloat,
  isHalf,
  shortestF32,
  signedFloat,
  type UnarySpelling,
} from "./c_halves.ts";
import { hoistInvariants } from "./c_hoist.ts";
import { mergeLoops } from "./c_merge.ts";
import { sharePhiloxBlocks, sumTerms } from "./c_philox.ts";
import { immutableLets, interchange, isUniform, stride } from "./c_interchange.ts";
import { clampUnprovenLoads } from "./cuda_bounds.ts";
import { CudaNamer } from "./cuda_names.ts";
import { scalarize } from "./cuda_scalarize.ts";
import { boolStorageToU32 } from "./legalize_bool.ts";

export class CEmitError extends Error {
  override name = "CEmitError";
}

/** The entry point every C kernel defines (the runtime renames it per kernel when it joins sources). */
export const C_ENTRY = "bf_kernel";
/** A parallel kernel's loop body, a static function (renamed per kernel like the entry). */
export const C_BODY = "bf_body";
/** The runtime pool's entry (runtime/cpu/pool.c), declared once per translation unit. */
const POOL_DECL = `#ifndef BF_PARALLEL_DECLARED
#define BF_PARALLEL_DECLARED
void bf_parallel(void (*body)(void* const*, int, int), void* const* args, int n);
#endif`;

/**
 * Workgroups run in parallel only when there is enough work to pay for handing it to the pool's threads
 * (a few microseconds): at least this many threads in all, or any per-thread loop.
 */
const PARALLEL_THREADS = 1024;

/** Threads per parallel chunk of a kernel with one workgroup: a few vectors' worth, a share per core. */
const CHUNK = 64;

/** The most accumulators a thread's loop may have and still run as SIMD lanes (see simdLoop). */
const MAX_SIMD_ACCUMULATORS = 4;

/** Legalizes and spells `k` for the CPU. */
export function emitC(k: Kernel): TargetKernel {
  let kernel = boolStorageToU32(k);
  kernel = hoistInvariants(mergeLoops(sharePhiloxBlocks(scalarize(clampUnprovenLoads(kernel).kernel))));
  const legal: Legal = { kernel, grid: [kernel.workgroups, 1, 1], guard: null };
  return { code: new Speller(legal).kernel(), grid: legal.grid, workgroupSize: kernel.workgroupSize };
}

const C_TYPE: Record<string, string> = {
  f32: "float",
  f16: "_Float16",
  bf16: "uint16_t",
  i32: "int32_t",
  u32: "uint32_t",
  bool: "bool",
  v4f32: "bf_float4",
  v4i32: "bf_int4",
  v4u32: "bf_uint4",
  v4f16: "bf_half4",
};

function floatLiteral(v: number): Spelled {
  const r = Math.fround(v);
  if (Number.isNaN(r)) return atom(`__builtin_nanf("")`);
  if (!Number.isFinite(r)) return r > 0 ? atom("__builtin_inff()") : { s: "-__builtin_inff()", p: UNARY };
  return signedFloat(r, shortestF32(Math.abs(r)) + "f");
}

/** libmvec's vector forms of these (bf_simd_math) let the compiler vectorize loops that call them. */
const SPELL_UNARY: Record<KUnOp, UnarySpelling<CHelper>> = {
  neg: { float: (x) => negate(x, false), int: (a, t) => negate(a, t === "u32") },
  abs: { float: call("fabsf"), int: (a, t) => (t === "u32" ? a : call("abs")(a)) },
  exp: { float: call("expf"), helpers: ["bf_simd_math"] },
  log: { float: call("logf"), helpers: ["bf_simd_math"] },
  sqrt: { float: call("sqrtf") },
  rsqrt: { float: (x) => reciprocal(call("sqrtf")(x), "1.0f") },
  tanh: { float: call("tanhf"), helpers: ["bf_simd_math"] },
  erf: { float: call("bf_erf"), helpers: ["bf_erf", "bf_simd_math"] },
  reciprocal: { float: (x) => reciprocal(x, "1.0f") },
  not: { int: (a, t) => not(a, t === "bool") },
};

type Reduce = Extract<KStmt, { k: "wg_reduce" }>;
type For = Extract<KStmt, { k: "for" }>;
type Swap = NonNullable<ReturnType<typeof interchange>>;

/** Whether `body` holds, at any depth, a statement `p` accepts. */
function holds(body: readonly KStmt[], p: (s: KStmt) => boolean): boolean {
  let found = false;
  visitStmts(body, (x) => (found ||= p(x)));
  return found;
}
const hasLoop = (body: readonly KStmt[]) => holds(body, (x) => x.k === "for");
/** Whether a statement is, or contains, a barrier or a workgroup reduction. */
const syncs = (s: KStmt) => holds([s], (x) => x.k === "barrier" || x.k === "wg_reduce");

/** Names a statement reads or sets (locals), including inside nested statements. */
function namesUsed(s: KStmt, into: Set<string>): void {
  visitStmts([s], (x) => {
    if (x.k === "set") into.add(x.name);
    for (const e of stmtExprs(x)) forEachExpr(e, (y) => y.k === "ref" && into.add(y.name));
  });
}

/**
 * A body that is only `if (gid < N) { ... }` (comments aside): N and the statements inside. Such a guard
 * is the loop kernels' bounds check for a last, partial workgroup.
 */
function gidGuard(body: readonly KStmt[]): { n: number; body: readonly KStmt[] } | undefined {
  const real = body.filter((s) => s.k !== "comment");
  const s = real[0];
  if (real.length !== 1 || s.k !== "if" || (s.else && s.else.length)) return undefined;
  const c = s.cond;
  if (c.k !== "bin" || c.op !== "lt" || c.a.k !== "id" || c.a.which !== "gid" || c.b.k !== "lit") {
    return undefined;
  }
  return { n: c.b.v, body: [...body.filter((x) => x.k === "comment"), ...s.then] };
}

/**
 * Whether a thread's loop may run its iterations as SIMD lanes, and its accumulators: step 1; no
 * barriers, reductions, shared-memory stores or inner loops; every store to a binding the loop loads from
 * only at that same index, at most one store per binding, at index `x + v` (x not reading the loop
 * variable v: one element per iteration, so no two iterations touch one element); and every local it sets that was
 * declared outside it set as `x = x + e` or `x = max(x, e)` (e not reading x) on f32/i32 values, at
 * most MAX_SIMD_ACCUMULATORS of them. Undefined for any other loop.
 */
function simdLoop(
  s: Extract<KStmt, { k: "for" }>,
  typeOf: (name: string) => KType | undefined,
  lets: ReadonlyMap<string, KExpr>,
): Map<string, "add" | "max"> | undefined {
  if (s.step.k !== "lit" || s.step.v !== 1) return undefined;
  const inner = new Set<string>();
  const acc = new Map<string, "add" | "max">();
  const reads = (e: KExpr, name: string) => {
    let found = false;
    forEachExpr(e, (y) => (found ||= y.k === "ref" && y.name === name));
    return found;
  };
  // Binding -> the indices its stores write (as data, to compare with the loads' indices).
  const stored = new Map<string, KExpr[]>();
  let ok = true;
  visitStmts(s.body, (x) => {
    if (x.k === "let") inner.add(x.name);
    if (x.k === "sstore" || x.k === "for" || x.k === "barrier" || x.k === "wg_reduce") ok = false;
    if (x.k !== "store") return;
    if (!stored.has(x.buf)) stored.set(x.buf, []);
    stored.get(x.buf)!.push(x.index);
  });
  const isV = (y: KExpr) => y.k === "ref" && y.name === s.v;
  for (const indices of stored.values()) {
    const i = indices[0];
    const perIteration = isV(i) ||
      (i.k === "bin" && i.op === "add" && ((isV(i.b) && !reads(i.a, s.v)) || (isV(i.a) && !reads(i.b, s.v))));
    if (!(indices.length === 1 && perIteration) && !disjointBlocks(indices, s.v, lets)) ok = false;
  }
  // A stored binding may be loaded only at an element the same iteration stores (an update in place,
  // compiler/stages/in_place_updates.ts): each lane then reads its own element before writing it.
  const storedAt = new Map([...stored].map(([b, is]) => [b, new Set(is.map((i) => JSON.stringify(i)))]));
  visitExprs(
    s.body,
    (
      e,
    ) => (ok &&= e.k !== "load" || !storedAt.has(e.buf) || storedAt.get(e.buf)!.has(JSON.stringify(e.index))),
  );
  if (!ok) return undefined;
  visitStmts(s.body, (x) => {
    if (x.k !== "set" || inner.has(x.name)) return;
    const t = typeOf(x.name);
    const e = x.value;
    if ((t !== "f32" && t !== "i32") || e.k !== "bin" || (e.op !== "add" && e.op !== "max")) {
      return void (ok = false);
    }
    const mine = (y: KExpr) => y.k === "ref" && y.name === x.name;
    const other = mine(e.a) ? e.b : e.op === "max" && mine(e.b) ? e.a : undefined;
    if (!other || reads(other, x.name) || (acc.has(x.name) && acc.get(x.name) !== e.op)) {
      return void (ok = false);
    }
    acc.set(x.name, e.op);
  });
  // Accumulators must not be read elsewhere in the loop (a partial sum is not the running sum).
  for (const name of acc.keys()) {
    let uses = 0;
    visitExprs(s.body, (y) => (uses += y.k === "ref" && y.name === name ? 1 : 0));
    if (uses !== countSets(s.body, name)) ok = false;
  }
  // Many accumulators (a GEMM template's register micro-tile over a short k-tile) would each need a
  // vector and a horizontal sum per loop: there the loop over threads vectorizes better, so leave it.
  return ok && acc.size <= MAX_SIMD_ACCUMULATORS ? acc : undefined;
}

/**
 * Whether the stores of one binding at `indices` write, in each iteration of a loop over `v`, a block of
 * its own: `base + k` with the same base terms for all, the base moving by c >= 2 per iteration and the
 * literal offsets k distinct in [0, c) (a four-lane vector stored lane by lane after scalarize).
 */
function disjointBlocks(indices: readonly KExpr[], v: string, lets: ReadonlyMap<string, KExpr>): boolean {
  const c = stride(indices[0], v, lets);
  if (!Number.isInteger(c) || c < 2 || indices.length > c) return false;
  const base = JSON.stringify(sumTerms(indices[0]).terms);
  const ks = new Set<number>();
  for (const i of indices) {
    const { terms, k } = sumTerms(i);
    if (JSON.stringify(terms) !== base || stride(i, v, lets) !== c || k < 0 || k >= c || ks.has(k)) {
      return false;
    }
    ks.add(k);
  }
  return true;
}

function countSets(body: readonly KStmt[], name: string): number {
  let n = 0;
  visitStmts(body, (x) => (n += x.k === "set" && x.name === name ? 1 : 0));
  return n;
}

class Speller extends HalfInF32Speller<CHelper> {
  protected readonly unarySpellings = SPELL_UNARY;
  private readonly names = new CudaNamer();
  /** Locals held per thread in arrays (see the file comment). */
  private readonly promoted = new Set<string>();
  private inThreads = false;
  /** Locals spelled as another name (a reduction loop's accumulators, see simdLoop). */
  private readonly aliases = new Map<string, string>();
  private readonly localType = new Map<string, KType>();
  /** Threads at or past this global id do nothing (see gidGuard). */
  private threadLimit: number | undefined;
  private usesGid = false;
  private temps = 0;
  /** The kernel's immutable locals declared once (c_interchange.ts), and those uniform in scope. */
  private readonly lets = immutableLets(this.k.body);
  private readonly uniformNames = new Set<string>();
  /** Index-math locals recomputed at the top of every thread loop in their scope (see recomputable). */
  private readonly cheap = new Set<string>();
  private readonly perThread: KStmt[] = [];
  /** Chunks of a single workgroup's threads run in parallel (see kernel), or 0. */
  private chunks = 0;
  /** Loops interchanged with the thread loop (for the header). */
  private swaps = 0;
  protected readonly barrier = "// barrier";
  protected readonly floatLiteral = floatLiteral;
  protected readonly builtins = { lid: "lid", x: "wg", y: "0" };

  protected error(msg: string): Error {
    return new CEmitError(msg);
  }

  protected type(t: KType): string {
    const name = C_TYPE[t] ?? this.fail(`no C type for ${t}`);
    if (isVector(t)) this.helpers.add("bf_vectors");
    if (t === "bf16") this.helpers.add("bf_bf16");
    return name;
  }

  kernel(): string {
    const k = this.k;
    const w = k.workgroupSize, n = k.workgroups;
    visitExprs(k.body, (e) => (this.usesGid ||= e.k === "id" && e.which === "gid"));
    const loops = hasLoop(k.body);
    const phased = k.body.some(syncs);
    const worth = n * w >= PARALLEL_THREADS || loops;
    const args = k.bindings.map((b, i) => {
      const t = this.type(b.t);
      const c = b.access === "read" ? "const " : "";
      return `  ${c}${t}* restrict ${this.names.name(b.name, "binding")} = (${c}${t}*)bf_args[${i}];`;
    });
    // One workgroup without barriers: its threads are independent, so they are split into chunks of
    // CHUNK threads, the chunks run in parallel, and each chunk is the workgroup of the rest of this file
    // (its thread loops, interchanged loops, hoisted locals) over its share of the threads.
    const chunked = n === 1 && !phased && worth && w > 1;
    this.depth = 2;
    for (const s of k.shared) this.line(`${this.type(s.t)} ${this.sharedName(s.name)}[${s.size}];`);
    const guarded = phased ? undefined : gidGuard(k.body);
    if (guarded) {
      // `if (gid < N)` around the whole body becomes the thread loop's bound: the body is then straight-line
      // code in the loop, so the compiler can hoist what is the same for every thread (uniform loads,
      // the optimizer's exp/log of its step counter) and vectorize the rest.
      this.threadLimit = guarded.n >= n * w ? undefined : guarded.n;
    }
    const active = this.threadLimit ?? w;
    if (chunked) this.chunks = Math.ceil(active / CHUNK);
    this.region(guarded ? guarded.body : k.body);
    const body = this.lines;
    const header = k.about.flatMap((a) => a.split("\n")).map((a) => `// ${a}`);
    header.push(
      `// ${n} workgroups of ${w} threads` +
        (phased ? "; threads run in phases split at barriers and reductions" : "; one thread loop") +
        (this.swaps ? `; ${this.swaps} loop(s) run outside the thread loop, vectorized across threads` : ""),
    );
    const parallel = (n > 1 && worth) || this.chunks > 0;
    const loop = this.chunks
      ? [`  for (int bf_chunk = bf_lo; bf_chunk < bf_hi; ++bf_chunk) {`, `    const int wg = 0;`]
      : [`  for (int wg = ${parallel ? "bf_lo" : "0"}; wg < ${parallel ? "bf_hi" : n}; ++wg) {`];
    // In parallel: the loop is the body of a function the runtime's pool (runtime/cpu/pool.c) runs
    // over ranges of its iterations on its threads; the pool is linked into every kernel library.
    const fn = parallel
      ? [
        POOL_DECL,
        `static void ${C_BODY}(void* const* bf_args, int bf_lo, int bf_hi) {`,
        ...args,
        ...loop,
        ...body,
        "  }",
        "}",
        "",
        `void ${C_ENTRY}(void* const* bf_args) {`,
        `  bf_parallel(${C_BODY}, bf_args, ${this.chunks || n});`,
        "}",
      ]
      : [`void ${C_ENTRY}(void* const* bf_args) {`, ...args, ...loop, ...body, "  }", "}"];
    const code = [header.join("\n"), cPrelude(this.helpers), fn.join("\n")];
    return code.join("\n\n") + "\n";
  }

  /**
   * A statement list at workgroup level: runs of thread-local statements as thread loops, syncs and
   * interchanged loops (c_interchange.ts) between them. A run's immutable locals with one value for the
   * whole workgroup (a row index from `wg`, a token id loaded at a uniform index) are declared once
   * before its thread loop: later phases then read a scalar, not one array element per thread, which
   * would be a gather in a vectorized loop. `simd`: the run's thread loops are interchanged loops' bodies.
   */
  private region(body: readonly KStmt[], simd = false): void {
    type Run = { readonly hoisted: KStmt[]; readonly perThread: KStmt[]; readonly body: KStmt[] };
    type Item = { readonly run: Run } | { readonly sync: KStmt } | { readonly swap: For; readonly how: Swap };
    const items: Item[] = [];
    let run: Run | undefined;
    const current = () => {
      if (!run) items.push({ run: run = { hoisted: [], perThread: [], body: [] } });
      return run;
    };
    for (const s of body) {
      if (s.k === "let" && this.lets.has(s.name) && isUniform(s.init, this.uniformNames, this.readOnly)) {
        this.uniformNames.add(s.name);
        current().hoisted.push(s);
        continue;
      }
      if (s.k === "let" && this.lets.has(s.name) && this.recomputable(s.init)) {
        this.cheap.add(s.name);
        current().perThread.push(s);
        continue;
      }
      const how = s.k === "for" && !syncs(s)
        ? interchange(s, this.uniformNames, this.readOnly, this.lets)
        : undefined;
      if (!syncs(s) && !how) {
        current().body.push(s);
        continue;
      }
      run = undefined;
      items.push(how ? { swap: s as For, how } : { sync: s });
    }
    // A let of a run read anywhere else in this list is promoted to one element per thread.
    const outside = (r: Item) => {
      const used = new Set<string>();
      for (const it of items) {
        if (it === r) continue;
        if ("run" in it) it.run.body.forEach((s) => namesUsed(s, used));
        else namesUsed("sync" in it ? it.sync : it.swap, used);
      }
      return used;
    };
    const scope = this.perThread.length;
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      if ("run" in item) this.perThread.push(...item.run.perThread);
      if ("swap" in item) {
        this.swapped(item.swap, item.how);
        continue;
      }
      if ("run" in item) {
        for (const s of item.run.hoisted) this.stmt(s as Exclude<KStmt, Reduce>);
        const it = item.run.body;
        if (!it.length) continue;
        const used = items.length > 1 ? outside(item) : new Set<string>();
        for (const s of it) {
          if (s.k !== "let" || !used.has(s.name)) continue;
          if (this.promoted.has(s.name)) this.fail(`local ${s.name} declared twice across barriers`);
          this.promoted.add(s.name);
          this.line(`${this.type(s.t)} ${this.names.name(s.name)}[${this.k.workgroupSize}];`);
        }
        this.threads(() => this.block(it), simd && !hasLoop(it));
        continue;
      }
      const it = item.sync;
      if (it.k === "barrier") {
        this.line("// barrier: the thread loop above has finished for every thread");
      } else if (it.k === "wg_reduce") {
        const group: Reduce[] = [];
        for (; i < items.length; i++) {
          const x = items[i];
          if (!("sync" in x) || x.sync.k !== "wg_reduce") break;
          group.push(x.sync);
        }
        i--;
        this.reduceGroup(group);
      } else if (it.k === "for") {
        const v = this.local(it.v);
        const [from, to, step] = [it.from, it.to, it.step].map((e) => this.uniform(e));
        const head = `for (int ${v} = ${from.s}; ${v} < ${paren(to, to.p <= REL)}; ${v} += ${step.s})`;
        this.braced(head, () => this.scoped(it.v, () => this.region(it.body)));
      } else if (it.k === "if") {
        this.line(`if (${this.uniform(it.cond).s}) {`);
        this.indented(() => this.region(it.then));
        if (it.else && it.else.length) {
          this.line("} else {");
          this.indented(() => this.region(it.else!));
        }
        this.line("}");
      } else {
        this.fail(`internal: ${it.k} taken for a synchronizing statement`);
      }
    }
    this.perThread.length = scope;
  }

  /**
   * Whether a local's value is index math of the thread's ids, literals and uniform or likewise
   * recomputable names (no memory read): each thread loop then computes it again (`row = gid`), where
   * keeping it in a per-thread array would make every vectorized access through it a gather.
   */
  private recomputable(e: KExpr): boolean {
    let ok = true;
    forEachExpr(e, (x) => {
      if (x.k === "load" || x.k === "sload" || x.k === "philox") ok = false;
      if (x.k === "ref" && !this.uniformNames.has(x.name) && !this.cheap.has(x.name)) ok = false;
    });
    return ok;
  }

  private min(a: string, b: string): string {
    this.helpers.add("bf_minmax_int");
    return `bf_min_i32(${a}, ${b})`;
  }

  /** `name` (a loop variable at workgroup level) uniform while `f` spells the loop's body. */
  private scoped(name: string, f: () => void): void {
    const had = this.uniformNames.has(name);
    this.uniformNames.add(name);
    f();
    if (!had) this.uniformNames.delete(name);
  }

  /**
   * A thread's loop run outside the thread loop (c_interchange.ts): the loop at workgroup level and a
   * vectorized thread loop inside it. A strided loop's variable is per thread (`base + lid`), and the
   * threads past the loop's end sit out that iteration.
   */
  private swapped(s: For, how: Swap): void {
    this.swaps++;
    const v = this.local(s.v);
    const to = this.uniform(s.to), step = this.uniform(s.step);
    if (how.kind === "uniform") {
      const from = this.uniform(s.from);
      const head = `for (int ${v} = ${from.s}; ${v} < ${paren(to, to.p <= REL)}; ${v} += ${step.s})`;
      return this.braced(head, () => this.scoped(s.v, () => this.region(s.body, true)));
    }
    const base = `bf_base${this.temps++}`;
    const from = this.uniform(how.offset);
    const body = () => {
      this.line(`const int ${v} = ${base} + lid;`);
      this.block(s.body);
    };
    this.braced(
      `for (int ${base} = ${from.s}; ${base} < ${paren(to, to.p <= REL)}; ${base} += ${step.s})`,
      () => this.threads(body, !hasLoop(s.body), `${paren(to, to.p <= REL)} - ${base}`),
    );
  }

  /** An expression evaluated once per workgroup (a bound or condition around a barrier). */
  private uniform(e: KExpr): Spelled {
    forEachExpr(e, (x) => {
      if (x.k === "id" && x.which !== "wg") {
        this.fail(`barrier under control flow that depends on ${x.which}`);
      }
    });
    return this.expr(e);
  }

  /**
   * One loop over the threads of the workgroup around `body`; `simd`: vectorized across threads (sound
   * because threads do not communicate between barriers), `end`: threads at or past it sit out.
   */
  private threads(body: () => void, simd = false, end?: string): void {
    const w = this.k.workgroupSize;
    if (simd) this.line("#pragma omp simd");
    const limit = this.threadLimit;
    let bound = limit === undefined ? `${w}` : `(${limit} - wg * ${w} < ${w} ? ${limit} - wg * ${w} : ${w})`;
    if (end !== undefined) bound = this.min(bound, end);
    if (this.chunks) bound = this.min(bound, `bf_chunk * ${CHUNK} + ${CHUNK}`);
    this.braced(`for (int lid = ${this.chunks ? `bf_chunk * ${CHUNK}` : "0"}; lid < ${bound}; ++lid)`, () => {
      if (this.usesGid) this.line(`const int gid = wg * ${w} + lid;`);
      this.inThreads = true;
      for (const s of this.perThread) this.stmt(s as Exclude<KStmt, Reduce>);
      body();
      this.inThreads = false;
    });
  }

  /**
   * A loop inside a thread whose iterations are independent but for accumulators (see simdLoop) is
   * vectorized with OpenMP's simd (the C compiler cannot prove that alone across our index math), with a
   * reduction clause per accumulator: per-lane partial results combined at the end, so a sum's order
   * depends on the machine's vector width, not on the run. The accumulators go through scalar temporaries (a promoted local is an
   * array element, which a reduction clause cannot name).
   */
  protected override stmt(s: Exclude<KStmt, Reduce>): void {
    const red = s.k === "for" ? simdLoop(s, (n) => this.localType.get(n), this.lets) : undefined;
    if (s.k !== "for" || !red) return super.stmt(s);
    const temps = [...red].map(([name, op]) => {
      const temp = `bf_acc${this.temps++}`;
      this.line(`${this.type(this.localType.get(name)!)} ${temp} = ${this.local(name)};`);
      return { name, op, temp };
    });
    const clauses = temps.map((r) => ` reduction(${r.op === "add" ? "+" : "max"}:${r.temp})`);
    this.line(`#pragma omp simd${clauses.join("")}`);
    const v = this.local(s.v);
    const to = this.expr(s.to);
    for (const r of temps) this.aliases.set(r.name, r.temp);
    this.braced(
      `for (int ${v} = ${this.expr(s.from).s}; ${v} < ${paren(to, to.p <= REL)}; ${v} += 1)`,
      () => this.block(s.body),
    );
    for (const r of temps) this.aliases.delete(r.name);
    for (const r of temps) this.line(`${this.local(r.name)} = ${r.temp};`);
  }

  /** Adjacent reductions: one thread loop fills a slot per thread for each, then each is folded in order. */
  protected reduceGroup(group: readonly Reduce[]): void {
    const w = this.k.workgroupSize;
    const slots = group.map((r) => {
      if (isVector(r.t) || isHalf(r.t) || r.t === "bool") this.fail(`wg_reduce of ${r.t}`);
      if (r.value.t !== r.t) this.fail(`wg_reduce of a ${r.value.t} value as ${r.t}`);
      const name = `bf_slots${this.temps++}`;
      this.line(`${this.type(r.t)} ${name}[${w}];`);
      return name;
    });
    this.line(
      `// wg_reduce (${group.map((r) => `${r.op} -> ${r.out}`).join(", ")}): slots folded left to right`,
    );
    this.threads(() => group.forEach((r, i) => this.line(`${slots[i]}[lid] = ${this.expr(r.value).s};`)));
    group.forEach((r, i) => {
      const out = this.names.name(r.out);
      const t = this.type(r.t);
      const combine = r.op === "sum"
        ? `${out} + ${slots[i]}[i]`
        : `${this.minMax("max", r.t)}(${out}, ${slots[i]}[i])`;
      this.line(`${t} ${out} = ${slots[i]}[0];`);
      this.line(`for (int i = 1; i < ${w}; ++i) ${out} = ${combine};`);
    });
  }

  // ---- the C-family hooks -------------------------------------------------------------------------

  protected local(name: string): string {
    const alias = this.aliases.get(name);
    if (alias !== undefined) return alias;
    const id = this.names.name(name);
    if (!this.promoted.has(name)) return id;
    return `${id}[${this.inThreads ? "lid" : "0"}]`;
  }

  protected sharedName(name: string): string {
    return this.names.name(name, "shared");
  }

  protected bufferAccess(buf: string, t: KType, read: boolean): string {
    const name = this.names.name(buf, "binding");
    if (!isVector(t)) return name;
    const c = read && this.readOnly.has(buf) ? "const " : "";
    return `((${c}${this.type(t)}*)${name})`;
  }

  protected declaration(name: string, t: KType, mutable: boolean): string {
    this.localType.set(name, t);
    if (this.promoted.has(name)) return this.local(name);
    return `${mutable ? "" : "const "}${this.type(t)} ${this.names.name(name)}`;
  }

  protected toInt(x: string): string {
    return x;
  }

  protected convert(a: Spelled, type: string): Spelled {
    return atom(`(${type})(${a.s})`);
  }

  protected truncate(x: Spelled, to: KType): Spelled {
    this.helpers.add("bf_f2i");
    return atom(`${to === "u32" ? "bf_f2u" : "bf_f2i"}(${x.s})`);
  }

  protected vector(t: KType, parts: readonly string[]): Spelled {
    return atom(`((${this.type(t)}){${parts.join(", ")}})`);
  }

  protected minMax(op: "max" | "min", t: KType): string {
    if (isFloat(t)) {
      this.helpers.add("bf_minmax_float");
      return op === "max" ? "bf_maxf" : "bf_minf";
    }
    this.helpers.add("bf_minmax_int");
    return `bf_${op}_${t === "u32" ? "u32" : "i32"}`;
  }

  protected toF32(a: Spelled, t: KType): Spelled {
    if (t === "f16") return atom(`(float)${paren(a, a.p < UNARY)}`);
    if (t === "bf16") {
      this.helpers.add("bf_bf16");
      return atom(`bf_bf16_to_f32(${a.s})`);
    }
    return a;
  }

  protected fromF32(a: Spelled, t: KType): Spelled {
    if (t === "f16") return atom(`(_Float16)(${a.s})`);
    if (t === "bf16") {
      this.helpers.add("bf_bf16");
      return atom(`bf_f32_to_bf16(${a.s})`);
    }
    return a;
  }
}
