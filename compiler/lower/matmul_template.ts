/**
 * The tiled matmul template: C[b] (m×n) = A[b] (m×k) · B[b] (k×n) with a fused epilogue, written in the
 * kernel IR so every emitter spells the same schedule.
 *
 * Schedule. Workgroup `wg` (linear over batch × tilesM × tilesN, row-major) owns one tm×tn tile of C.
 * It walks K in steps of tk: the threads cooperatively copy the tm×tk slab of A and the tk×tn slab of B
 * into shared arrays `As`/`Bs` (both k-major, so the inner loop reads one row of each per k), barrier,
 * then each thread accumulates its rm×rn micro-tile from shared memory, barrier. A thread's micro-tile is
 * strided — rows ty + i·(tm/rm), cols tx + j·(tn/rn) — so neighbouring threads read neighbouring shared
 * words (no bank conflicts) and store neighbouring columns of C (coalesced).
 *
 * Numerics. Every C element is one f32 sum over k in increasing order, whatever the tile shape, so the
 * result is deterministic and independent of the tiling. Out-of-range A/B elements load as 0 (adding
 * 0·x leaves the sum unchanged); out-of-range C elements skip the epilogue.
 *
 * The operand loaders are callbacks (the caller folds transposes, permutes and casts into them), so the
 * template knows no memory layout; `contiguousA`/`contiguousB` only pick which index the cooperative
 * copy walks fastest, so that neighbouring threads read neighbouring memory.
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
import { chooseTiles, type MatmulTiles, threadsOf } from "./matmul_tiles.ts";

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
   * only for in-range elements. Called once: the template runs the statements in a loop over elements.
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
}

export class MatmulTemplateError extends Error {
  constructor(kernel: string, message: string) {
    super(`matmul template ${kernel}: ${message}`);
  }
}

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

  // Which tile this workgroup owns.
  let b: KExpr = i32(0);
  let tileIdx: KExpr = wgId;
  if (batch > 1) {
    body.push(let_("mm_b", div(wgId, i32(perBatch))));
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

  const kt = I("mm_k0");
  const loop: KStmt[] = [];
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
  for (const c of copies) loop.push(...c.copy);
  loop.push(barrier);

  // The inner product over this slab: per kk, rm words of A and rn words of B feed rm·rn accumulators.
  const step = (kk: KExpr, sfx: string): KStmt[] => {
    const inner: KStmt[] = [];
    for (let i = 0; i < t.rm; i++) {
      const at = add(add(mul(kk, i32(strideA)), I("mm_ty")), i32(i * ty));
      inner.push(let_(`mm_av${sfx}${i}`, sload("As", at, "f32")));
    }
    for (let j = 0; j < t.rn; j++) {
      const at = add(add(mul(kk, i32(strideB)), I("mm_tx")), i32(j * tx));
      inner.push(let_(`mm_bv${sfx}${j}`, sload("Bs", at, "f32")));
    }
    for (let i = 0; i < t.rm; i++) {
      for (let j = 0; j < t.rn; j++) {
        inner.push(set(accs[i][j], add(F(accs[i][j]), mul(F(`mm_av${sfx}${i}`), F(`mm_bv${sfx}${j}`)))));
      }
    }
    return inner;
  };
  // A loop, not unrolled: unrolling made lavapipe slower (more code, same loads).
  loop.push(for_("mm_kk", i32(0), i32(t.tk), i32(1), step(I("mm_kk"), "")));
  // The next iteration overwrites the slabs: everyone must be done reading them.
  loop.push(barrier);
  body.push(for_("mm_k0", i32(0), i32(k), i32(t.tk), loop));

  // Epilogue, staged through shared memory one micro-tile row at a time: pass p writes row p of every
  // thread's micro-tile (together a ty×tn block of C) to `Cs`, then the workgroup walks that block with
  // neighbouring threads on neighbouring columns. So the caller's epilogue appears once in the code (not
  // rm·rn times: lavapipe's compile time grows with code size), and its loads and stores are coalesced.
  shared.push({ name: "Cs", t: "f32", size: ty * t.tn });
  const p = I("mm_p");
  const stage: KStmt[] = [];
  for (let j = 0; j < t.rn; j++) {
    // Row p of the micro-tile: accumulators are scalars, so pick by a chain of selects on p.
    let v: KExpr = F(accs[t.rm - 1][j]);
    for (let i = t.rm - 2; i >= 0; i--) v = select(bin("eq", p, i32(i)), F(accs[i][j]), v);
    const at = add(add(mul(I("mm_ty"), i32(t.tn)), I("mm_tx")), i32(j * tx));
    stage.push({ k: "sstore", arr: "Cs", index: at, value: v });
  }
  stage.push(barrier);
  const e = add(lid, mul(I("mm_q"), i32(threads)));
  const each: KStmt[] = [
    let_("mm_e", e),
    let_("mm_row", add(add(I("mm_row0"), mul(p, i32(ty))), div(I("mm_e"), i32(t.tn)))),
    let_("mm_col", add(I("mm_col0"), mod(I("mm_e"), i32(t.tn)))),
  ];
  const rowsGuard = m % t.tm !== 0, colsGuard = n % t.tn !== 0;
  let inRange: KExpr | undefined;
  if (rowsGuard) inRange = lt(I("mm_row"), i32(m));
  if (colsGuard) {
    const ok = lt(I("mm_col"), i32(n));
    inRange = inRange ? bin("and", inRange, ok) : ok;
  }
  const epi = [
    let_("mm_out", sload("Cs", I("mm_e"), "f32")),
    ...spec.epilogue(b, I("mm_row"), I("mm_col"), F("mm_out")),
  ];
  each.push(...(inRange ? [if_(inRange, epi)] : epi));
  // The block holds threads·rn elements, so every thread handles exactly rn of them.
  stage.push(for_("mm_q", i32(0), i32(t.rn), i32(1), each));
  // The next pass overwrites Cs.
  stage.push(barrier);
  body.push(for_("mm_p", i32(0), i32(t.rm), i32(1), stage));

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
 * once.
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
    // Out-of-range elements load 0; their indices are clamped so the loader is never handed one.
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
  if (threads > 1024) throw new MatmulTemplateError(name, `${threads} threads per workgroup (max 1024)`);
}
