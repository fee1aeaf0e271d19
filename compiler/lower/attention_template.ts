/**
 * The attention kernel (fused kind "attention", see compiler/fusion/attention.ts): O = P·V with
 * P = softmax-and-friends(Q·Kᵀ), a tile of query rows at a time, without writing S or P to memory. A
 * workgroup keeps R query rows' scores in workgroup memory; fat micro-tiles and few threads, because that is
 * what wins on lavapipe (the schedule step by step and the measurements: DESIGN.md, notes:
 * compiler/lower/attention_template.ts).
 */
import { rootIndex } from "./root_index.ts";
import { visitExprs } from "../kernel_ir/walk.ts";
import { type NodeId, numel } from "../../ir/mod.ts";
import { ATTENTION_WORKGROUP, attentionRows } from "../fusion/attention.ts";
import { reductionStages } from "../fusion/kernel_facts.ts";
import {
  add,
  barrier,
  bin,
  cast,
  div,
  for_,
  i32,
  if_,
  type Kernel,
  type KExpr,
  type KStmt,
  let_,
  lid,
  lit,
  lt,
  mod,
  mul,
  ref,
  set,
  sload,
  sub,
  wgId,
} from "../kernel_ir/ir.ts";
import { delinearize, exprKey, type Idx } from "./index_math.ts";
import {
  builtKernel,
  type KernelJob,
  LoweringError,
  reduceCombine,
  reduceInit,
  Scope,
  ValueBuilder,
} from "./values.ts";

/** Most partial sums a thread keeps in its score or output micro-tile (wider tiles loop over blocks). */
export const ATTENTION_MAX_ACCUMULATORS = 128;
/** Rows of a thread's output micro-tile (its score micro-tile takes all R rows). */
export const ATTENTION_OUTPUT_ROWS = 8;

const I = (name: string) => ref(name, "i32");
const F = (name: string) => ref(name, "f32");

export function attentionKernel(job: KernelJob): Kernel {
  const { g, k, ctx, name } = job;
  const T = ATTENTION_WORKGROUP;
  const pvId = k.anchor!;
  const pv = g.nodes[pvId];
  const mms = [...k.members].filter((m) => g.nodes[m].op === "matmul" && m !== pvId);
  if (mms.length !== 1) throw new LoweringError(`${name}: expected one scores GEMM, found ${mms.length}`);
  if (pv.attrs.transpose_a) throw new LoweringError(`${name}: PV reads the probabilities transposed`);
  const qkId = mms[0];
  const qk = g.nodes[qkId];
  const space = k.space;
  const rank = space.length;
  const batchShape = space.slice(0, rank - 2);
  const rowsPerBatch = space[rank - 2];
  const keys = space[rank - 1];
  const qShape = g.nodes[qk.inputs[0]].type.shape;
  const headDim = qk.attrs.transpose_a ? qShape[rank - 2] : qShape[rank - 1];
  const outShape = pv.type.shape;
  const outCols = outShape[rank - 1];
  const stages = reductionStages(g, k);
  const reductions = stages.flat();
  const widest = Math.max(1, ...stages.map((s) => s.length));
  const R = attentionRows(rowsPerBatch, keys, headDim, reductions.length, widest);
  if (R === 0) throw new LoweringError(`${name}: the attention does not fit in workgroup memory`);
  const group = Math.max(1, T / R); // threads per row in steps 3 and 4

  const vb = new ValueBuilder(ctx);
  const top = new Scope();
  const body = top.stmts;
  // Tiles of R rows; when R does not divide the rows, the last tile's extra rows repeat the last row
  // (every index stays in range) and store nothing.
  const tiles = Math.ceil(rowsPerBatch / R);
  const ragged = rowsPerBatch % R !== 0;
  const workgroups = (numel(space) / keys / rowsPerBatch) * tiles;
  body.push({
    k: "comment",
    text: `attention: ${R} query rows per workgroup, ${keys} keys, head dim ${headDim}, ${outCols} outputs`,
  });
  // This workgroup's rows: batch index `att_b` (over the batch dims), rows att_row0 .. att_row0 + R - 1;
  // att_base is the linear index of the batch's first row.
  body.push(let_("att_b", tiles > 1 ? div(wgId, i32(tiles)) : wgId));
  body.push(let_("att_row0", tiles > 1 ? mul(mod(wgId, i32(tiles)), i32(R)) : i32(0)));
  body.push(let_("att_base", mul(I("att_b"), i32(rowsPerBatch))));
  const row0 = I("att_row0"), base = I("att_base");
  const batchDims = delinearize(I("att_b"), batchShape).dims;
  /** The row whose values tile row `r` computes. */
  const rowOf = (r: KExpr): KExpr => ragged ? bin("min", add(row0, r), i32(rowsPerBatch - 1)) : add(row0, r);
  /** Tile-local rows of the row indices the kernel builds (else: row - att_row0). */
  const localKeys = new Map(Array.from({ length: R }, (_, r) => [exprKey(rowOf(i32(r))), i32(r)]));
  const localRow = (row: KExpr): KExpr => localKeys.get(exprKey(row)) ?? sub(row, row0);
  const at = (i: KExpr, j: KExpr, transposed: boolean): Idx => ({
    dims: [...batchDims, ...(transposed ? [j, i] : [i, j])],
  });
  /** Index of the scores (and of the softmax's members) at row `row` and key `j`. */
  const scoreIdx = (j: KExpr, row: KExpr): Idx => ({
    dims: [...batchDims, row, j],
    lin: add(mul(add(base, row), i32(keys)), j),
  });
  let loops = 0;
  /**
   * for (c = 0; c < ceil(n / step); c++) { let x = c * step + lane; [if (x < n)] { body } } — a loop
   * every thread runs the same number of times (with one trip, just the body; names stay unique).
   */
  const chunks = (
    n: number,
    step: number,
    lane: KExpr,
    fill: (s: Scope, x: KExpr) => void,
    parent = top,
  ): KStmt[] => {
    const c = `att_c${loops}`, x = `att_x${loops}`;
    loops++;
    const s = new Scope(parent);
    fill(s, I(x));
    const trips = Math.ceil(n / step);
    const inner = [
      let_(x, trips > 1 ? add(mul(I(c), i32(step)), lane) : lane),
      ...(n % step === 0 ? s.stmts : [if_(lt(I(x), i32(n)), s.stmts)]),
    ];
    return trips > 1 ? [for_(c, i32(0), i32(trips), i32(1), inner)] : inner;
  };

  /**
   * C[r, c] = Σ_e A[r, e]·B[c, e] over a rows × cols tile, A in workgroup memory, B loaded through the
   * value builder: thread (ty, tx) of (rows / rowsPerThread) × (T / that) owns rows ty + i·(rows /
   * rowsPerThread) and columns tx + c·tx_count, so one load of B serves rowsPerThread multiply-adds and
   * one load of A serves every column of the thread. Out-of-range columns are clamped for the loads
   * and skipped by `done`.
   */
  const microTiles = (o: {
    prefix: string;
    rows: number;
    cols: number;
    depth: number;
    rowsPerThread: number;
    shared: (r: KExpr, e: KExpr) => KExpr;
    load: (s: Scope, col: KExpr, e: KExpr) => KExpr;
    done: (s: Scope, r: KExpr, col: KExpr, acc: KExpr) => void;
  }): KStmt[] => {
    const ty = o.rows / o.rowsPerThread, tx = T / ty;
    // Columns per thread per block, so a thread holds at most ATTENTION_MAX_ACCUMULATORS sums.
    const nc = Math.min(
      Math.ceil(o.cols / tx),
      Math.max(1, Math.floor(ATTENTION_MAX_ACCUMULATORS / o.rowsPerThread)),
    );
    const blockCols = tx * nc;
    const blocks = Math.ceil(o.cols / blockCols);
    const s = new Scope(top);
    const sy = `${o.prefix}_y`, sx = `${o.prefix}_x`, blk = `${o.prefix}_k`;
    s.stmts.push(let_(sy, ty > 1 ? div(lid, i32(tx)) : i32(0)));
    s.stmts.push(let_(sx, ty > 1 ? mod(lid, i32(tx)) : lid));
    const base = blocks > 1 ? add(mul(I(blk), i32(blockCols)), I(sx)) : I(sx);
    const rowAt = (i: number) => add(I(sy), i32(i * ty));
    const colAt = (c: number) => add(base, i32(c * tx));
    // Whether column c of the thread can fall past the end (in the last block).
    const ragged = (c: number) => (blocks - 1) * blockCols + (c + 1) * tx > o.cols;
    const acc = (i: number, c: number) => `${o.prefix}${i}_${c}`;
    for (let i = 0; i < o.rowsPerThread; i++) {
      for (let c = 0; c < nc; c++) s.stmts.push(let_(acc(i, c), lit(0, "f32"), true));
    }
    const inner = new Scope(s);
    const e = I(`${o.prefix}_e`);
    const bs = Array.from({ length: nc }, (_, c) => {
      const col = ragged(c) ? bin("min", colAt(c), i32(o.cols - 1)) : colAt(c);
      return vb.letIn(inner, "bv", o.load(inner, col, e));
    });
    for (let i = 0; i < o.rowsPerThread; i++) {
      const a = vb.letIn(inner, "av", o.shared(rowAt(i), e));
      for (let c = 0; c < nc; c++) inner.stmts.push(set(acc(i, c), add(F(acc(i, c)), mul(a, bs[c]))));
    }
    s.stmts.push(for_(`${o.prefix}_e`, i32(0), i32(o.depth), i32(1), inner.stmts));
    for (let i = 0; i < o.rowsPerThread; i++) {
      for (let c = 0; c < nc; c++) {
        const d = new Scope(s);
        o.done(d, rowAt(i), colAt(c), F(acc(i, c)));
        if (ragged(c)) s.stmts.push(if_(lt(colAt(c), i32(o.cols)), d.stmts));
        else s.stmts.push(...d.stmts);
      }
    }
    if (blocks === 1) return s.stmts;
    // The thread ids stay outside the loop over column blocks.
    return [...s.stmts.slice(0, 2), for_(blk, i32(0), i32(blocks), i32(1), s.stmts.slice(2))];
  };

  // 1. The query rows.
  body.push(...chunks(R * headDim, T, lid, (s, i) => {
    const r = div(i, i32(headDim)), d = mod(i, i32(headDim));
    const q = cast(vb.valueAt(s, qk.inputs[0], at(rowOf(r), d, qk.attrs.transpose_a as boolean)), "f32");
    s.stmts.push({ k: "sstore", arr: "att_w", index: i, value: q });
  }));
  body.push(barrier);

  // 2. Scores: micro-tiles of rows × keys, over the head dim in increasing order.
  body.push(...microTiles({
    prefix: "att_a",
    rows: R,
    cols: keys,
    depth: headDim,
    rowsPerThread: R,
    shared: (r, e) => sload("att_w", add(mul(r, i32(headDim)), e), "f32"),
    load: (s, j, e) => cast(vb.valueAt(s, qk.inputs[1], at(e, j, qk.attrs.transpose_b as boolean)), "f32"),
    done: (s, r, j, acc) =>
      s.stmts.push({ k: "sstore", arr: "att_s", index: add(mul(r, i32(keys)), j), value: acc }),
  }));
  body.push(barrier);
  // The scores GEMM at any element of the tile is its staged score.
  vb.special.set(qkId, (idx) => {
    const r = localRow(idx.dims[rank - 2]);
    return sload("att_s", add(mul(r, i32(keys)), idx.dims[rank - 1]), "f32");
  });

  // Steps 3 and 4: with R ≤ T, thread t works on row t / group, keys j ≡ t (mod group); with R > T,
  // thread t on rows t, t + T, … one after the other, all keys.
  const perThread = Math.max(1, R / T);
  if (perThread === 1) body.push(let_("att_tr", group > 1 ? div(lid, i32(group)) : lid));
  const tu: KExpr = group > 1 ? mod(lid, i32(group)) : i32(0);
  const tr = I("att_tr");
  const myRow = rowOf(tr);
  localKeys.set(exprKey(myRow), tr);
  /** The body once per row of this thread (`att_tr`). */
  const eachRow = (fill: (s: Scope) => void): KStmt[] => {
    const s = new Scope(top);
    if (perThread > 1) s.stmts.push(let_("att_tr", add(lid, mul(I("att_rr"), i32(T)))));
    fill(s);
    return perThread > 1 ? [for_("att_rr", i32(0), i32(perThread), i32(1), s.stmts)] : s.stmts;
  };

  // 3. Row statistics, stage by stage.
  let done = 0;
  for (const stage of stages) {
    const combine = (r: NodeId, a: KExpr, b: KExpr) => bin(reduceCombine(g, r), a, b);
    body.push(...eachRow((rs) => {
      const accs = stage.map((r) => {
        const acc = vb.fresh("acc");
        rs.stmts.push(let_(acc, reduceInit(g, r), true));
        return acc;
      });
      rs.stmts.push(...chunks(keys, group, tu, (s, j) => {
        stage.forEach((r, i) => {
          const v = cast(vb.valueAt(s, g.nodes[r].inputs[0], scoreIdx(j, myRow)), "f32");
          s.stmts.push(set(accs[i], combine(r, F(accs[i]), v)));
        });
      }, rs));
      stage.forEach((_, i) => {
        rs.stmts.push(
          group > 1
            // A partial: reduction i of the stage at att_w[i·T + t].
            ? { k: "sstore", arr: "att_w", index: add(i32(i * T), lid), value: F(accs[i]) }
            : { k: "sstore", arr: "att_r", index: add(i32((done + i) * R), tr), value: F(accs[i]) },
        );
      });
    }));
    body.push(barrier);
    if (group > 1) {
      // Thread r folds row r's partials in order.
      const fold: KStmt[] = [];
      stage.forEach((r, i) => {
        const base = add(i32(i * T), mul(lid, i32(group)));
        const tot = vb.fresh("tot");
        fold.push(let_(tot, sload("att_w", base, "f32"), true));
        fold.push(for_("att_g", i32(1), i32(group), i32(1), [
          set(tot, combine(r, F(tot), sload("att_w", add(base, I("att_g")), "f32"))),
        ]));
        fold.push({ k: "sstore", arr: "att_r", index: add(i32((done + i) * R), lid), value: F(tot) });
      });
      body.push(if_(lt(lid, i32(R)), fold));
      body.push(barrier);
    }
    stage.forEach((r, i) => {
      const slot = done + i;
      vb.special.set(r, (idx) => sload("att_r", add(i32(slot * R), localRow(idx.dims[rank - 2])), "f32"));
    });
    done += stage.length;
  }

  // 4. Probabilities (PV's A operand, after dropout and casts) replace the scores.
  body.push(...eachRow((rs) => {
    rs.stmts.push(...chunks(keys, group, tu, (s, j) => {
      const p = cast(vb.valueAt(s, pv.inputs[0], scoreIdx(j, myRow)), "f32");
      s.stmts.push({ k: "sstore", arr: "att_s", index: add(mul(tr, i32(keys)), j), value: p });
    }, rs));
  }));
  vb.special.delete(qkId);
  body.push(barrier);

  // 5. O[r, d] = Σ_j P[r, j]·V[j, d] for the R rows (j increasing), then the PV kernel's epilogue.
  body.push(...microTiles({
    prefix: "att_o",
    rows: R,
    cols: outCols,
    depth: keys,
    rowsPerThread: Math.min(R, ATTENTION_OUTPUT_ROWS),
    shared: (r, e) => sload("att_s", add(mul(r, i32(keys)), e), "f32"),
    load: (s, d, e) => cast(vb.valueAt(s, pv.inputs[1], at(e, d, pv.attrs.transpose_b as boolean)), "f32"),
    done: (s, r, d, acc) => {
      vb.special.set(pvId, () => acc);
      const row = add(row0, r);
      const lin = add(mul(add(base, row), i32(outCols)), d);
      const stores = ragged ? new Scope(s) : s;
      for (const root of k.roots) {
        const shape = g.nodes[root].type.shape;
        if (numel(shape) !== numel(outShape)) {
          throw new LoweringError(`${name}: epilogue root %${root} differs in size from the output`);
        }
        vb.storeAt(stores, root, rootIndex(g, root, { lin, shape: outShape, dims: [...batchDims, row, d] }));
      }
      if (ragged) s.stmts.push(if_(lt(row, i32(rowsPerBatch)), stores.stmts));
      vb.special.delete(pvId);
    },
  }));

  // Where every root is stored through a view (rootIndex's dims, not the linear index), att_base is never
  // read: no declaration of it then (nvcc warns of an unused variable, and CI treats warnings as errors).
  let baseRead = false;
  visitExprs(body, (e) => {
    if (e.k === "ref" && e.name === "att_base") baseRead = true;
  });
  if (!baseRead) body.splice(body.findIndex((st) => st.k === "let" && st.name === "att_base"), 1);
  return builtKernel(job, "attention", vb, {
    shared: [
      { name: "att_w", t: "f32", size: Math.max(R * headDim, widest * T) },
      { name: "att_s", t: "f32", size: R * keys },
      { name: "att_r", t: "f32", size: Math.max(1, reductions.length) * R },
    ],
    workgroupSize: T,
    workgroups,
    body,
  });
}
