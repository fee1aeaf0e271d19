/**
 * The tiled matmul template: C[b] (m×n) = A[b] (m×k) · B[b] (k×n) with a fused epilogue, written in the
 * kernel IR so every emitter spells the same schedule. A workgroup owns a tm×tn tile of C and walks K
 * through shared slabs, each thread a strided rm×rn micro-tile; a large epilogue is staged through shared
 * memory. Every C element is one f32 sum over k in increasing order, so results are deterministic (the
 * schedule and what staging saves: DESIGN.md, notes: compiler/lower/matmul_template.ts).
 */
import {
  add,
  barrier,
  bin,
  div,
  f32,
  for_,
  i32,
  if_,
  type KBinding,
  type Kernel,
  type KExpr,
  type KShared,
  type KStmt,
  let_,
  lid,
  lt,
  mod,
  mul,
  ref,
  select,
  set,
  sload,
  wgId,
} from "../kernel_ir/ir.ts";
import { chooseTiles, type MatmulTiles, sharedBytesOf, threadsOf } from "./matmul_tiles.ts";
import { forEachExpr, stmtExprs, visitStmts } from "../kernel_ir/walk.ts";

export type { MatmulTiles } from "./matmul_tiles.ts";

export interface MatmulSpec {
  name: string;
  about: string[];
  usesF16: boolean;
  /** C[b] (m×n) = A[b] (m×k) · B[b] (k×n) for b < batch. */
  batch: number;
  m: number;
  n: number;
  k: number;
  /** The caller's buffers (operands, epilogue inputs, outputs). */
  bindings: KBinding[];
  /** f32 value of A[b][row][col]; indices are i32 exprs always in range (the template guards). */
  loadA: (b: KExpr, row: KExpr, col: KExpr) => KExpr;
  loadB: (b: KExpr, row: KExpr, col: KExpr) => KExpr;
  /**
   * Statements that consume the f32 accumulator of C[b][row][col] (e.g. add bias, GELU, store); they run
   * only for in-range elements. Called once, or once per micro-tile element when the template runs a
   * small epilogue straight from the accumulators; then locals it declares must have names unique
   * across calls (else the template stages it and calls it once).
   */
  epilogue: (b: KExpr, row: KExpr, col: KExpr, acc: KExpr) => KStmt[];
  /**
   * Which index of the operand is contiguous in memory (a hint for coalescing; any value is correct).
   * Default: A "col" (row-major m×k: k is contiguous), B "col" (row-major k×n: n is contiguous). A
   * transposed operand is "row".
   */
  contiguousA?: "row" | "col";
  contiguousB?: "row" | "col";
  /** Overrides the tile choice (tests and benchmarks); default `chooseTiles(m, n, k, batch)`. */
  tiles?: MatmulTiles;
  /** Overrides the epilogue strategy (tests and benchmarks); default by the epilogue's size. */
  epilogueMode?: "direct" | "staged";
}

export class MatmulTemplateError extends Error {
  override name = "MatmulTemplateError";
  constructor(kernel: string, message: string) {
    super(`matmul template ${kernel}: ${message}`);
  }
}

/**
 * An epilogue runs straight from the accumulators when it is copied at most DIRECT_EPILOGUE_COPIES times
 * (micro-tiles up to 8×8: 16×16 ones' 256 direct copies made lavapipe's compile 2.9 s instead of 1.4 s cold)
 * and its copies stay under DIRECT_EPILOGUE_NODES IR nodes. So a bias + GELU epilogue (~30 nodes) runs
 * direct from 8×8 micro-tiles: staged through shared memory it cost the GEMM 2× on lavapipe (6.9 → 12.3 ms
 * for BERT-tiny's FFN-in GEMM), where every barrier of the staging loop is expensive.
 */
export const DIRECT_EPILOGUE_NODES = 4096;
export const DIRECT_EPILOGUE_COPIES = 64;

const I = (name: string) => ref(name, "i32");
const F = (name: string) => ref(name, "f32");

export function matmulKernel(spec: MatmulSpec): Kernel {
  const { name, m, n, k, batch } = spec;
  for (const [what, v] of [["batch", batch], ["m", m], ["n", n], ["k", k]] as const) {
    if (!Number.isInteger(v) || v < 1) {
      throw new MatmulTemplateError(name, `${what} must be a positive integer, got ${v}`);
    }
  }
  const t = spec.tiles ?? chooseTiles(m, n, k, batch);
  checkTiles(name, t);
  const threads = threadsOf(t);
  const tx = t.tn / t.rn; // threads along n
  const ty = t.tm / t.rm; // threads along m
  const tilesM = Math.ceil(m / t.tm), tilesN = Math.ceil(n / t.tn);
  const perBatch = tilesM * tilesN;
  const workgroups = batch * perBatch;
  if (workgroups > 2 ** 31 - 1) throw new MatmulTemplateError(name, `${workgroups} workgroups overflow i32`);

  const body: KStmt[] = [];
  body.push({
    k: "comment",
    text: `tile ${t.tm}x${t.tn}x${t.tk}, ${t.rm}x${t.rn} per thread, ${threads} threads`,
  });

  // Which tile this workgroup owns. Unit extents are folded away so small cases read simply.
  let b: KExpr = i32(0);
  let tileIdx: KExpr = wgId;
  if (batch > 1) {
    body.push(let_("mm_b", perBatch > 1 ? div(wgId, i32(perBatch)) : wgId));
    b = I("mm_b");
    if (perBatch > 1) {
      body.push(let_("mm_t", mod(wgId, i32(perBatch))));
      tileIdx = I("mm_t");
    } else tileIdx = i32(0);
  }
  body.push(let_("mm_row0", mul(tilesN > 1 ? div(tileIdx, i32(tilesN)) : tileIdx, i32(t.tm))));
  body.push(let_("mm_col0", tilesN > 1 ? mul(mod(tileIdx, i32(tilesN)), i32(t.tn)) : i32(0)));
  body.push(let_("mm_tx", tx > 1 ? mod(lid, i32(tx)) : i32(0)));
  body.push(let_("mm_ty", tx > 1 ? div(lid, i32(tx)) : lid));

  // Shared slabs, k-major. A copy that walks k fastest writes a k-major slab with a stride of the tile
  // width; one word of padding puts neighbouring threads' words in different banks.
  const aKFast = (spec.contiguousA ?? "col") === "col";
  const bKFast = (spec.contiguousB ?? "col") === "row";
  const strideA = t.tm + (aKFast ? 1 : 0);
  const strideB = t.tn + (bKFast ? 1 : 0);
  const shared: KShared[] = [
    { name: "As", t: "f32", size: t.tk * strideA },
    { name: "Bs", t: "f32", size: t.tk * strideB },
  ];

  const accs: string[][] = [];
  for (let i = 0; i < t.rm; i++) {
    accs.push([]);
    for (let j = 0; j < t.rn; j++) {
      const a = `mm_acc_${i}_${j}`;
      accs[i].push(a);
      body.push(let_(a, f32(0), true));
    }
  }

  // The main loop over K.
  const kt = I("mm_k0");
  const copies = [
    slabCopy({
      arr: "As",
      dim: t.tm,
      tk: t.tk,
      stride: strideA,
      threads,
      kFast: aKFast,
      base: I("mm_row0"),
      dimSize: m,
      k,
      k0: kt,
      prefix: "mm_a",
      load: (d, kk) => spec.loadA(b, d, kk),
    }),
    slabCopy({
      arr: "Bs",
      dim: t.tn,
      tk: t.tk,
      stride: strideB,
      threads,
      kFast: bKFast,
      base: I("mm_col0"),
      dimSize: n,
      k,
      k0: kt,
      prefix: "mm_b",
      load: (d, kk) => spec.loadB(b, kk, d),
    }),
  ];
  // The copy's thread → element split does not depend on the k step: computed once, before the loop.
  for (const c of copies) body.push(...c.setup);
  const loop: KStmt[] = [];
  for (const c of copies) loop.push(...c.copy);
  loop.push(barrier);
  // The inner product over this slab: per kk, rm words of A and rn words of B feed rm·rn accumulators.
  // A loop, not unrolled: unrolling made lavapipe slower (more code, the same shared loads).
  const kk = I("mm_kk");
  const inner: KStmt[] = [];
  for (let i = 0; i < t.rm; i++) {
    const at = add(add(mul(kk, i32(strideA)), I("mm_ty")), i32(i * ty));
    inner.push(let_(`mm_av${i}`, sload("As", at, "f32")));
  }
  for (let j = 0; j < t.rn; j++) {
    const at = add(add(mul(kk, i32(strideB)), I("mm_tx")), i32(j * tx));
    inner.push(let_(`mm_bv${j}`, sload("Bs", at, "f32")));
  }
  for (let i = 0; i < t.rm; i++) {
    for (let j = 0; j < t.rn; j++) {
      inner.push(set(accs[i][j], add(F(accs[i][j]), mul(F(`mm_av${i}`), F(`mm_bv${j}`)))));
    }
  }
  loop.push(for_("mm_kk", i32(0), i32(t.tk), i32(1), inner));
  // The next step overwrites the slabs: everyone must be done reading them.
  loop.push(barrier);
  body.push(for_("mm_k0", i32(0), i32(k), i32(t.tk), loop));

  const guards = { rows: m % t.tm !== 0, cols: n % t.tn !== 0 };
  const ctx: EpilogueCtx = { spec, t, tx, ty, threads, accs, b, guards };
  // A probe call sizes the epilogue; when it is staged, the probe is the one copy the kernel uses.
  let mode = spec.epilogueMode;
  let probe: KStmt[] | undefined;
  if (mode === undefined) {
    probe = spec.epilogue(b, I("mm_row"), I("mm_col"), F("mm_out"));
    const copies = t.rm * t.rn;
    mode = copies <= DIRECT_EPILOGUE_COPIES && nodeCount(probe) * copies <= DIRECT_EPILOGUE_NODES
      ? "direct"
      : "staged";
  }
  const direct = mode === "direct" ? directEpilogue(ctx) : undefined;
  if (direct) body.push(...direct);
  else if (spec.epilogueMode === "direct") {
    throw new MatmulTemplateError(name, "the epilogue declares the same local in more than one call");
  } else {
    shared.push({ name: "Cs", t: "f32", size: ty * t.tn });
    body.push(...stagedEpilogue(ctx, probe));
  }

  const sharedBytes = shared.reduce((s, a) => s + 4 * a.size, 0);
  if (sharedBytes > MAX_SHARED_BYTES) {
    throw new MatmulTemplateError(
      name,
      `tiles ${
        JSON.stringify(t)
      } need ${sharedBytes} bytes of workgroup memory, over WebGPU's ${MAX_SHARED_BYTES}`,
    );
  }
  return {
    name,
    kind: "matmul",
    bindings: spec.bindings,
    shared,
    workgroupSize: threads,
    workgroups,
    body,
    about: spec.about,
    usesF16: spec.usesF16,
  };
}

/** WebGPU's guaranteed limits, which compiled output must respect to run on any adapter. */
export const MAX_THREADS = 256;
export const MAX_SHARED_BYTES = 16384;

interface EpilogueCtx {
  spec: MatmulSpec;
  t: MatmulTiles;
  tx: number;
  ty: number;
  threads: number;
  accs: string[][];
  b: KExpr;
  guards: { rows: boolean; cols: boolean };
}

/**
 * The epilogue once per micro-tile element, straight from the accumulators; undefined when the calls
 * declare clashing locals (they would share one block where no guard separates them).
 */
function directEpilogue(c: EpilogueCtx): KStmt[] | undefined {
  const { t, tx, ty, guards } = c;
  const out: KStmt[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < t.rm; i++) {
    const row = `mm_r${i}`;
    out.push(let_(row, add(add(I("mm_row0"), I("mm_ty")), i32(i * ty))));
    const rowStmts: KStmt[] = [];
    for (let j = 0; j < t.rn; j++) {
      const col = `mm_c${i}_${j}`;
      const stmts = c.spec.epilogue(c.b, I(row), I(col), F(c.accs[i][j]));
      for (const s of stmts) {
        if (s.k !== "let") continue;
        if (seen.has(s.name)) return undefined;
        seen.add(s.name);
      }
      rowStmts.push(let_(col, add(add(I("mm_col0"), I("mm_tx")), i32(j * tx))));
      rowStmts.push(...(guards.cols ? [if_(lt(I(col), i32(c.spec.n)), stmts)] : stmts));
    }
    out.push(...(guards.rows ? [if_(lt(I(row), i32(c.spec.m)), rowStmts)] : rowStmts));
  }
  return out;
}

/**
 * The epilogue staged through shared memory one micro-tile row at a time: pass p writes row p of every
 * thread's micro-tile (together a ty×tn block of C) to `Cs`; then the workgroup walks that block with
 * neighbouring threads on neighbouring columns and runs the one copy of the epilogue on each element.
 */
function stagedEpilogue(c: EpilogueCtx, stmts?: KStmt[]): KStmt[] {
  const { t, tx, ty, threads, guards } = c;
  const p = I("mm_p");
  const pass: KStmt[] = [];
  for (let j = 0; j < t.rn; j++) {
    // Row p of the micro-tile. Accumulators are scalars, so a chain of selects on p picks it (on
    // lavapipe a select chain was faster than a chain of uniform branches).
    let v: KExpr = F(c.accs[t.rm - 1][j]);
    for (let i = t.rm - 2; i >= 0; i--) v = select(bin("eq", p, i32(i)), F(c.accs[i][j]), v);
    const at = add(add(mul(I("mm_ty"), i32(t.tn)), I("mm_tx")), i32(j * tx));
    pass.push({ k: "sstore", arr: "Cs", index: at, value: v });
  }
  pass.push(barrier);
  const each: KStmt[] = [
    let_("mm_e", add(lid, mul(I("mm_q"), i32(threads)))),
    let_("mm_row", add(add(I("mm_row0"), mul(p, i32(ty))), div(I("mm_e"), i32(t.tn)))),
    let_("mm_col", add(I("mm_col0"), mod(I("mm_e"), i32(t.tn)))),
  ];
  let inRange: KExpr | undefined;
  if (guards.rows) inRange = lt(I("mm_row"), i32(c.spec.m));
  if (guards.cols) {
    const ok = lt(I("mm_col"), i32(c.spec.n));
    inRange = inRange ? bin("and", inRange, ok) : ok;
  }
  const epi = [
    let_("mm_out", sload("Cs", I("mm_e"), "f32")),
    ...(stmts ?? c.spec.epilogue(c.b, I("mm_row"), I("mm_col"), F("mm_out"))),
  ];
  each.push(...(inRange ? [if_(inRange, epi)] : epi));
  // The block holds threads·rn elements, so every thread handles exactly rn of them.
  pass.push(for_("mm_q", i32(0), i32(t.rn), i32(1), each));
  // The next pass overwrites Cs.
  pass.push(barrier);
  return [for_("mm_p", i32(0), i32(t.rm), i32(1), pass)];
}

interface SlabCopy {
  arr: string;
  /** Tile width along m (A) or n (B). */
  dim: number;
  tk: number;
  stride: number;
  threads: number;
  /** Walk k fastest (neighbouring threads read neighbouring k) or the tile dimension fastest. */
  kFast: boolean;
  /** First row (A) / column (B) of the tile, and the operand's extent in that dimension. */
  base: KExpr;
  dimSize: number;
  k: number;
  k0: KExpr;
  prefix: string;
  /** The operand at (tile dimension index, k index). */
  load: (d: KExpr, kk: KExpr) => KExpr;
}

/**
 * Statements by which the workgroup copies a dim×tk slab of an operand into shared `arr` (k-major,
 * `stride` words per k). Thread lid copies elements e = lid + s·threads; when `threads` is a multiple of
 * the fast extent, the (fast, slow) split of e is the same for every s up to a constant, so it is computed
 * once (`setup`, outside the K loop).
 */
function slabCopy(c: SlabCopy): { setup: KStmt[]; copy: KStmt[] } {
  const setup: KStmt[] = [];
  const out: KStmt[] = [];
  const total = c.dim * c.tk;
  const fast = c.kFast ? c.tk : c.dim;
  const steps = Math.ceil(total / c.threads);
  const dimGuard = c.dimSize % c.dim !== 0;
  const kGuard = c.k % c.tk !== 0;
  const uniformSplit = c.threads % fast === 0;
  if (uniformSplit) {
    setup.push(let_(`${c.prefix}f`, fast === 1 ? i32(0) : mod(lid, i32(fast))));
    setup.push(let_(`${c.prefix}s`, fast === 1 ? lid : div(lid, i32(fast))));
  }
  for (let s = 0; s < steps; s++) {
    let f: KExpr, sl: KExpr;
    if (uniformSplit) {
      f = I(`${c.prefix}f`);
      sl = add(I(`${c.prefix}s`), i32((s * c.threads) / fast));
    } else {
      const e = add(lid, i32(s * c.threads));
      f = mod(e, i32(fast));
      sl = div(e, i32(fast));
    }
    const [d, kk] = c.kFast ? [sl, f] : [f, sl];
    const gd = add(c.base, d), gk = add(c.k0, kk);
    // Out-of-range elements load 0; their indices are clamped so the loader is never handed one out of
    // range (a select evaluates both sides), and the copy stays branch-free.
    let cond: KExpr | undefined;
    let ld = gd, lk = gk;
    if (dimGuard) {
      cond = lt(gd, i32(c.dimSize));
      ld = bin("min", gd, i32(c.dimSize - 1));
    }
    if (kGuard) {
      const ok = lt(gk, i32(c.k));
      cond = cond ? bin("and", cond, ok) : ok;
      lk = bin("min", gk, i32(c.k - 1));
    }
    const v = c.load(ld, lk);
    const value = cond ? select(cond, v, f32(0)) : v;
    const st: KStmt = { k: "sstore", arr: c.arr, index: add(mul(kk, i32(c.stride)), d), value };
    const partial = (s + 1) * c.threads > total;
    out.push(partial ? if_(lt(add(lid, i32(s * c.threads)), i32(total)), [st]) : st);
  }
  return { setup, copy: out };
}

function checkTiles(name: string, t: MatmulTiles): void {
  const ok = [t.tm, t.tn, t.tk, t.rm, t.rn].every((v) => Number.isInteger(v) && v >= 1) &&
    t.tm % t.rm === 0 && t.tn % t.rn === 0;
  if (!ok) throw new MatmulTemplateError(name, `bad tiles ${JSON.stringify(t)}`);
  const threads = threadsOf(t);
  if (threads > MAX_THREADS) {
    throw new MatmulTemplateError(
      name,
      `tiles ${JSON.stringify(t)} need ${threads} threads (max ${MAX_THREADS})`,
    );
  }
  // Checked again on the finished kernel; this names the cause before any work.
  if (sharedBytesOf(t) > MAX_SHARED_BYTES) {
    throw new MatmulTemplateError(
      name,
      `tiles ${JSON.stringify(t)} need ${
        sharedBytesOf(t)
      } bytes of workgroup memory (max ${MAX_SHARED_BYTES})`,
    );
  }
}

/** IR nodes (statements and expressions) in `body`: the code-size measure for the epilogue choice. */
export function nodeCount(body: readonly KStmt[]): number {
  let n = 0;
  visitStmts(body, (s) => {
    n++;
    for (const e of stmtExprs(s)) forEachExpr(e, () => n++);
  });
  return n;
}
