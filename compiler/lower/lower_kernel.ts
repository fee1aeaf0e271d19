/**
 * Lowers one fused kernel (a set of graph nodes, see compiler/fusion) to the kernel IR. The kernel's
 * shape of work is chosen here: one thread per element for loop kernels, one workgroup per row for
 * reduce kernels, the tiled template for matmuls, one thread per column for scatter-adds, one workgroup
 * per tile of query rows for attention (attention_template.ts).
 */
import { rootIndex } from "./root_index.ts";
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import type { FusedKernel } from "../fusion/types.ts";
import { blockPartials, reductionStages } from "../fusion/kernel_facts.ts";
import {
  add,
  barrier,
  bin,
  cast,
  div,
  for_,
  gid,
  i32,
  if_,
  type Kernel,
  type KExpr,
  type KStmt,
  let_,
  lid,
  lit,
  load,
  lt,
  mod,
  mul,
  ref,
  select,
  set,
  sload,
  store,
  wgId,
} from "../kernel_ir/ir.ts";
import { delinearize, type Idx, linearize } from "./index_math.ts";
import { attentionKernel } from "./attention_template.ts";
import { matmulKernel } from "./matmul_template.ts";
import {
  builtKernel,
  computeType,
  type KernelJob,
  LoweringError,
  reduceCombine,
  reduceInit,
  Scope,
  storedTypeOf,
  ValueBuilder,
  type ValueContext,
} from "./values.ts";
import { describeKernel, kernelName } from "./naming.ts";
import { columnGroups, LOOP_WORKGROUP, rowWorkgroup } from "../targets/shapes.ts";
import { DEFAULT_PROFILE, type TargetProfile } from "../targets/profiles.ts";

export function lowerKernel(
  g: Graph,
  k: FusedKernel,
  ctx: ValueContext,
  profile: TargetProfile = DEFAULT_PROFILE,
): Kernel {
  const name = kernelName(g, k);
  const about = describeKernel(g, k);
  // f16 arithmetic (a member typed f16) or storage (a member or operand whose buffer holds f16).
  const f16 = (id: NodeId) => g.nodes[id].type.dtype === "f16" || storedTypeOf(ctx, id) === "f16";
  const usesF16 = [...k.members].some((m) => f16(m) || g.nodes[m].inputs.some(f16));
  const job: KernelJob = { g, k, ctx, name, about, usesF16 };
  switch (k.kind) {
    case "loop":
      return lowerLoop(job);
    case "reduce":
      return lowerReduce(job, profile);
    case "matmul":
      return lowerMatmul(job);
    case "scatter":
      return lowerScatter(job, profile.scatterOwners);
    case "attention":
      return attentionKernel(job);
  }
}

/** The index of `id` whose linear position is `lin` (roots may be reshapes of the kernel space). */
function idxAtLinear(g: Graph, id: NodeId, lin: KExpr): Idx {
  return delinearize(lin, g.nodes[id].type.shape);
}

/** A kernel of one thread per element of `total`, those past it idle. */
function loopKernel(job: KernelJob, vb: ValueBuilder, total: number, stmts: KStmt[]): Kernel {
  const body = [if_(lt(gid, i32(total)), stmts)];
  const workgroups = Math.max(1, Math.ceil(total / LOOP_WORKGROUP));
  return builtKernel(job, "loop", vb, { shared: [], workgroupSize: LOOP_WORKGROUP, workgroups, body });
}

function lowerLoop(job: KernelJob): Kernel {
  const { g, k, ctx, name } = job;
  const vb = new ValueBuilder(ctx);
  const total = numel(k.space);
  const body = new Scope();
  for (const r of k.roots) {
    if (numel(g.nodes[r].type.shape) !== total) {
      throw new LoweringError(
        `${name}: root %${r} has ${numel(g.nodes[r].type.shape)} elements, not ${total}`,
      );
    }
    vb.storeAt(body, r, idxAtLinear(g, r, gid));
  }
  return loopKernel(job, vb, total, body.stmts);
}

function lowerReduce(job: KernelJob, profile: TargetProfile): Kernel {
  const { g, k, ctx, name } = job;
  const space = k.space;
  const axes = k.axes!;
  const outerAxes = space.map((_, d) => d).filter((d) => !axes.includes(d));
  const rowShape = axes.map((d) => space[d]);
  const outerShape = outerAxes.map((d) => space[d]);
  const rowLen = numel(rowShape);
  const rows = numel(outerShape);
  const trailing = axes.every((a, i) => a === space.length - axes.length + i);
  // One thread per output row, looping over its elements, for column sums (reduced axes leading, e.g. bias
  // gradients: neighbouring threads read neighbouring columns), short rows, and where the target profile
  // wants it for many rows (lavapipe and the CPU, where a workgroup per row pays for a shared-memory tree
  // with a barrier per level: LayerNorm was 10x slower on lavapipe than a serial loop per thread). Else
  // one workgroup per row: on a GPU, coalesced loads and a block for every row (targets/profiles.ts).
  // Long column sums (many rows reduced, few columns: a bias gradient over all tokens) would leave too few
  // threads busy; there `groups` threads share each column (columnGroups) and combine their partial sums
  // in workgroup memory, in a fixed order.
  const groups = trailing ? 1 : columnGroups(profile, rows, rowLen);
  const split = groups > 1;
  const perThread = !split && (!trailing || rowWorkgroup(profile, rows, rowLen) === 0);
  const wg = split || perThread ? LOOP_WORKGROUP : rowWorkgroup(profile, rows, rowLen);
  // Outputs per workgroup when split; consecutive threads take consecutive columns (coalesced loads).
  const columns = LOOP_WORKGROUP / groups;
  // A row-block kernel: each workgroup walks `block` rows in turn (the body below is the loop's body, row
  // = wg·block + rr) and each thread adds its own columns of every row into per-part column sums, which
  // are registers since a thread owns the same rowLen / wg columns in every row.
  const block = k.rowBlock ?? 0;
  if (block && (!trailing || perThread || rowLen % wg !== 0 || rows % block !== 0)) {
    throw new LoweringError(`${name}: ${block} rows a workgroup need rows of a workgroup each`);
  }
  const partials = blockPartials(g, k);

  const vb = new ValueBuilder(ctx);
  const top = new Scope();
  const rs = block ? new Scope(top) : top;
  if (split) {
    top.stmts.push(let_("row", add(mul(wgId, i32(columns)), mod(lid, i32(columns)))));
    top.stmts.push(let_("grp", div(lid, i32(columns))));
    top.stmts.push(let_("valid", lt(ref("row", "i32"), i32(rows))));
  } else {
    const blockRow = add(mul(wgId, i32(block)), ref("rr", "i32"));
    rs.stmts.push(let_("row", block ? blockRow : perThread ? gid : wgId));
  }
  const row = ref("row", "i32");
  const grp = ref("grp", "i32");
  const valid = ref("valid", "bool");
  const outer = delinearize(row, outerShape).dims;
  const elemIdx = (j: KExpr): Idx => {
    const r = delinearize(j, rowShape).dims;
    const dims: KExpr[] = new Array(space.length);
    outerAxes.forEach((d, i) => (dims[d] = outer[i]));
    axes.forEach((d, i) => (dims[d] = r[i]));
    return trailing ? { dims, lin: add(mul(row, i32(rowLen)), j) } : { dims };
  };
  const rowIdx: Idx = {
    dims: space.map((_, d) => (axes.includes(d) ? i32(0) : outer[outerAxes.indexOf(d)])),
    lin: row,
  };

  /** for (j = lid; j < rowLen; j += wg) { ... } (per thread: j = 0..rowLen) with a fresh scope per body. */
  // Rows drawn from Philox (dropout) and walked by one thread: four consecutive elements per iteration
  // share one Philox block, as the vectorized loop kernels do, instead of one block per element.
  const quads = perThread && trailing && rowLen % 4 === 0 && rowLen >= 8 && readsRandom(g, k, ctx);
  const rowLoop = (fill: (s: Scope, idx: Idx) => void): KStmt => {
    const inner = new Scope(rs);
    if (quads) {
      const q4 = mul(ref("q", "i32"), i32(4));
      const base = add(mul(row, i32(rowLen)), q4);
      for (let c = 0; c < 4; c++) {
        const j = add(q4, i32(c));
        fill(inner, { ...elemIdx(j), quad: { base, lane: c } });
      }
      return for_("q", i32(0), i32(rowLen / 4), i32(1), inner.stmts);
    }
    const j = ref("j", "i32");
    fill(inner, elemIdx(j));
    if (split) return if_(valid, [for_("j", grp, i32(rowLen), i32(groups), inner.stmts)]);
    return perThread
      ? for_("j", i32(0), i32(rowLen), i32(1), inner.stmts)
      : for_("j", lid, i32(rowLen), i32(wg), inner.stmts);
  };
  /** Combines the `groups` partial values of each column in workgroup memory (a fixed-order tree). */
  const combineGroups = (op: "add" | "max", acc: string, out: string) => {
    top.stmts.push({ k: "sstore", arr: "colred", index: lid, value: ref(acc, "f32") }, barrier);
    for (let step = groups / 2; step >= 1; step /= 2) {
      const other = sload("colred", add(lid, i32(step * columns)), "f32");
      top.stmts.push(
        if_(lt(grp, i32(step)), [{
          k: "sstore",
          arr: "colred",
          index: lid,
          value: bin(op, sload("colred", lid, "f32"), other),
        }]),
        barrier,
      );
    }
    top.stmts.push(let_(out, sload("colred", mod(lid, i32(columns)), "f32")), barrier);
  };

  const rowStages = reductionStages(g, k).map((st) => st.filter((r) => !partials.includes(r)));
  for (const stage of rowStages.filter((st) => st.length > 0)) {
    const accs = stage.map((r) => {
      const acc = vb.fresh("acc");
      rs.stmts.push(let_(acc, reduceInit(g, r), true));
      return acc;
    });
    rs.stmts.push(rowLoop((s, idx) => {
      stage.forEach((r, i) => {
        const n = g.nodes[r];
        const v = cast(vb.valueAt(s, n.inputs[0], idx), "f32");
        s.stmts.push(set(accs[i], bin(reduceCombine(g, r), ref(accs[i], "f32"), v)));
      });
    }));
    stage.forEach((r, i) => {
      const n = g.nodes[r];
      if (!isFloatish(computeType(n.type.dtype))) throw new LoweringError(`${name}: integer reductions`);
      const out = vb.fresh("red");
      if (split) {
        combineGroups(reduceCombine(g, r), accs[i], out);
      } else if (perThread) {
        rs.stmts.push(let_(out, ref(accs[i], "f32")));
      } else {
        rs.stmts.push({
          k: "wg_reduce",
          op: n.op === "reduce_sum" ? "sum" : "max",
          t: "f32",
          value: ref(accs[i], "f32"),
          out,
        });
      }
      vb.special.set(r, () => ref(out, "f32"));
    });
  }

  const elemRoots = k.roots.filter((r) => numel(g.nodes[r].type.shape) === numel(space) && rowLen > 1);
  const rowRoots = k.roots.filter((r) => !elemRoots.includes(r) && !partials.includes(r));
  for (const r of rowRoots) {
    if (numel(g.nodes[r].type.shape) !== rows) {
      throw new LoweringError(`${name}: root %${r} is neither element- nor row-shaped`);
    }
  }
  // Row-level results: every thread computes them (uniformly), thread 0 stores; when split, the first
  // group of each valid column computes and stores them.
  const rowStores = new Scope(rs);
  for (const r of rowRoots) {
    const v = vb.valueAt(split ? rowStores : rs, r, rowShapeIdx(g, r, rowIdx, space));
    rowStores.stmts.push(store(vb.bind(r, "write"), row, cast(v, vb.storedType(r))));
  }
  if (rowStores.stmts.length) {
    if (split) top.stmts.push(if_(bin("and", valid, bin("eq", grp, i32(0))), rowStores.stmts));
    else if (perThread) top.stmts.push(...rowStores.stmts);
    else rs.stmts.push(if_(bin("eq", lid, i32(0)), rowStores.stmts));
  }
  if (block) {
    blockColumns(g, { vb, top, rs, partials, elemRoots, block, wg, rowLen, row, elemIdx, space });
  } else if (elemRoots.length) {
    top.stmts.push(rowLoop((s, idx) => {
      for (const r of elemRoots) {
        const lin = idx.lin ?? linearOver(idx, space);
        vb.storeAt(s, r, sameShapeAs(g, r, space) ? { dims: idx.dims, lin } : idxAtLinear(g, r, lin));
      }
    }));
  }
  return builtKernel(job, "reduce", vb, {
    shared: split ? [{ name: "colred", t: "f32", size: LOOP_WORKGROUP }] : [],
    workgroupSize: wg,
    workgroups: split
      ? Math.ceil(rows / columns)
      : perThread
      ? Math.max(1, Math.ceil(rows / wg))
      : rows / Math.max(1, block),
    body: perThread ? [if_(lt(gid, i32(rows)), top.stmts)] : top.stmts,
  });
}

/**
 * The rest of a row-block kernel (FusedKernel.rowBlock): the element roots' loop of each row, unrolled
 * over the rowLen / wg columns a thread owns so that each owns a register per part sum, adding the
 * element into it; the loop over the block's rows around the per-row body; then the part sums stored, a
 * row of them per workgroup. (A workgroup reduction inside a loop ends with a barrier of its target's
 * legalize rule, so no thread starts the next row's reductions while another still reads this row's.)
 */
function blockColumns(
  g: Graph,
  c: {
    vb: ValueBuilder;
    top: Scope;
    rs: Scope;
    partials: readonly NodeId[];
    elemRoots: readonly NodeId[];
    block: number;
    wg: number;
    rowLen: number;
    row: KExpr;
    elemIdx: (j: KExpr) => Idx;
    space: readonly number[];
  },
) {
  const { vb, top, rs, partials, block, wg, rowLen, row } = c;
  const owned = rowLen / wg;
  const accs = partials.map((p) =>
    Array.from({ length: owned }, () => {
      const acc = vb.fresh("col");
      top.stmts.push(let_(acc, reduceInit(g, p), true));
      return acc;
    })
  );
  for (let t = 0; t < owned; t++) {
    const s = new Scope(rs);
    const j = vb.fresh("j");
    s.stmts.push(let_(j, add(lid, i32(t * wg))));
    const jr = ref(j, "i32");
    const idx = c.elemIdx(jr);
    for (const r of c.elemRoots) {
      vb.storeAt(s, r, sameShapeAs(g, r, c.space) ? idx : idxAtLinear(g, r, idx.lin!));
    }
    partials.forEach((p, i) => {
      const view = g.nodes[p].inputs[0];
      // The part view of a value over the kernel's own space is read at the row's element index, so the
      // value is the one the row's own work computed (the same memo entry), not a second computation.
      const whole = g.nodes[view].op === "reshape" ? g.nodes[view].inputs[0] : undefined;
      const rest = g.nodes[view].type.shape.slice(2);
      const v = whole !== undefined && sameShapeAs(g, whole, c.space)
        ? cast(vb.valueAt(s, whole, idx), "f32")
        : cast(
          vb.valueAt(s, view, {
            dims: [wgId, ref("rr", "i32"), ...delinearize(jr, rest).dims],
            lin: add(mul(row, i32(rowLen)), jr),
          }),
          "f32",
        );
      s.stmts.push(set(accs[i][t], bin(reduceCombine(g, p), ref(accs[i][t], "f32"), v)));
    });
    rs.stmts.push(...s.stmts);
  }
  top.stmts.push(for_("rr", i32(0), i32(block), i32(1), rs.stmts));
  partials.forEach((p, i) => {
    const out = vb.bind(p, "write");
    for (let t = 0; t < owned; t++) {
      const at = add(mul(wgId, i32(rowLen)), add(lid, i32(t * wg)));
      top.stmts.push(store(out, at, cast(ref(accs[i][t], "f32"), vb.storedType(p))));
    }
  });
}

function rowShapeIdx(g: Graph, r: NodeId, rowIdx: Idx, space: readonly number[]): Idx {
  const shape = g.nodes[r].type.shape;
  const keepDims = shape.length === space.length;
  return keepDims ? rowIdx : delinearize(rowIdx.lin!, shape);
}

function sameShapeAs(g: Graph, r: NodeId, space: readonly number[]): boolean {
  const s = g.nodes[r].type.shape;
  return s.length === space.length && s.every((d, i) => d === space[i]);
}

function linearOver(idx: Idx, shape: readonly number[]): KExpr {
  let acc: KExpr = i32(0);
  let stride = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    if (shape[d] !== 1) acc = add(acc, mul(idx.dims[d], i32(stride)));
    stride *= shape[d];
  }
  return acc;
}

function lowerMatmul(job: KernelJob): Kernel {
  const { g, k, ctx, name, about, usesF16 } = job;
  const mmId = k.anchor!;
  const mm = g.nodes[mmId];
  const [aId, bId] = mm.inputs;
  const aShape = g.nodes[aId].type.shape;
  const r = aShape.length;
  const batchShape = aShape.slice(0, r - 2);
  const ta = mm.attrs.transpose_a as boolean, tb = mm.attrs.transpose_b as boolean;
  const [m, kk] = ta ? [aShape[r - 1], aShape[r - 2]] : [aShape[r - 2], aShape[r - 1]];
  const n = mm.type.shape[r - 1];
  const vb = new ValueBuilder(ctx);
  const batchDims = (b: KExpr) => delinearize(b, batchShape).dims;
  const operand = (id: NodeId, b: KExpr, i: KExpr, j: KExpr, transposed: boolean): KExpr => {
    const pure = new Scope(undefined, true);
    const dims = [...batchDims(b), ...(transposed ? [j, i] : [i, j])];
    return cast(vb.valueAt(pure, id, { dims }), "f32");
  };
  for (const root of k.roots) {
    if (numel(g.nodes[root].type.shape) !== numel(mm.type.shape)) {
      throw new LoweringError(`${name}: epilogue root %${root} differs in size from the matmul`);
    }
  }
  const kernel = matmulKernel({
    name,
    about,
    usesF16,
    batch: numel(batchShape),
    m,
    n,
    k: kk,
    bindings: [],
    loadA: (b, row, col) => operand(aId, b, row, col, ta),
    loadB: (b, row, col) => operand(bId, b, row, col, tb),
    epilogue: (b, row, col, acc) => {
      const s = new Scope();
      vb.special.set(mmId, () => acc);
      const lin = add(mul(add(mul(b, i32(m)), row), i32(n)), col);
      for (const root of k.roots) {
        const dims = [...batchDims(b), row, col];
        vb.storeAt(s, root, rootIndex(g, root, { lin, shape: mm.type.shape, dims }));
      }
      vb.special.delete(mmId);
      return s.stmts;
    },
  });
  // The template is built before the bindings are complete (loaders bind lazily), so attach them now.
  return { ...kernel, bindings: vb.bindings, about: [...about, ...vb.describeBindings()] };
}

/**
 * The epilogue of a matmul kernel whose product a library GEMM (compiler/lower/gemm_library.ts) wrote to
 * a scratch buffer (f32, or the product's own f16/bf16) laid out like the matmul node ([batch…, m, n],
 * contiguous): a loop kernel, one thread per product element, that computes and stores every root exactly as lowerMatmul's epilogue
 * does, with the matmul's value loaded from the scratch buffer instead of the template's accumulator.
 * The same ValueBuilder and `special` hook as the template, so the two paths share all lowering logic.
 */
export function lowerGemmEpilogue(
  g: Graph,
  k: FusedKernel,
  ctx: ValueContext,
  scratch: { readonly buffer: number; readonly dtype: "f32" | "f16" | "bf16" },
): Kernel {
  const mmId = k.anchor!;
  const mmShape = g.nodes[mmId].type.shape;
  const total = numel(mmShape);
  const name = `${kernelName(g, k)}_epilogue`;
  const f16 = (id: NodeId) => g.nodes[id].type.dtype === "f16" || storedTypeOf(ctx, id) === "f16";
  const usesF16 = scratch.dtype === "f16" || k.roots.some(f16) ||
    [...k.members].some((m) => m !== mmId && f16(m));
  const vb = new ValueBuilder(ctx);
  const what = `%${mmId} matmul product ${scratch.dtype} (library GEMM output)`;
  const t = vb.bindBuffer(scratch.buffer, scratch.dtype, "read", total, what);
  // The product as the graph defines it: an f16/bf16 scratch holds the matmul's own rounded value
  // (gemm_library.ts scratchType), widened to the compute type like any stored operand.
  vb.special.set(mmId, (idx) => cast(load(t, linearize(idx, mmShape), scratch.dtype), "f32"));
  const body = new Scope();
  for (const root of k.roots) {
    if (numel(g.nodes[root].type.shape) !== total) {
      throw new LoweringError(`${name}: epilogue root %${root} differs in size from the matmul`);
    }
    const dims = delinearize(gid, mmShape).dims;
    vb.storeAt(body, root, rootIndex(g, root, { lin: gid, shape: mmShape, dims }));
  }
  const about = [`epilogue of a library GEMM: ${describeKernel(g, k).join("; ")}`];
  return loopKernel({ g, k, ctx, name, about, usesF16 }, vb, total, body.stmts);
}

/**
 * A scatter-add (the embedding gradient): `owners` threads per column, thread (c, j) owning the table rows
 * r with r mod owners = j. Each walks every index in order and adds the updates of its own rows, so every
 * element of the table is summed by one thread in index order: the same bits for any `owners`, no atomics.
 * One owner per column (lavapipe, the CPU: a workgroup is a loop on one core) is a column's serial loop; a
 * GPU takes many (targets/profiles.ts), since a thread per column of BERT's hidden size is 1,024 threads
 * walking every token, too few to keep the device busy; the extra threads only re-read the indices.
 * The kernel's other roots (elementwise over the updates) are stored by the owner of each index's row (an
 * index out of range: owner 0). A table of few rows has few owners and so few threads; GPU profiles
 * rewrite those as masked column sums before fusion (compiler/passes/scatter_column_sums.ts).
 */
function lowerScatter(job: KernelJob, owners: number): Kernel {
  const { g, k, ctx } = job;
  const sc = g.nodes[k.anchor!];
  const [idxId, updId] = sc.inputs;
  const idxShape = g.nodes[idxId].type.shape;
  const updShape = g.nodes[updId].type.shape;
  const rows = sc.attrs.rows as number;
  const cols = numel(updShape.slice(idxShape.length));
  const count = numel(idxShape);
  const parts = Math.max(1, Math.min(owners, rows));
  const vb = new ValueBuilder(ctx);
  const out = vb.bind(sc.id, "read_write");
  const top = new Scope();
  const c = ref("c", "i32");
  const j = ref("owner", "i32");
  // Consecutive threads take consecutive columns (coalesced loads of the updates, stores of the table).
  top.stmts.push(let_("c", parts === 1 ? gid : mod(gid, i32(cols))));
  top.stmts.push(let_("owner", parts === 1 ? i32(0) : div(gid, i32(cols))));
  // The accumulator is read, added to and written back in its stored type (the policy keeps it f32).
  const st = vb.storedType(sc.id);
  const zero = cast(lit(0, "f32"), st);
  top.stmts.push(
    for_("r", j, i32(rows), i32(parts), [store(out, add(mul(ref("r", "i32"), i32(cols)), c), zero)]),
  );
  const body = new Scope(top);
  const i = ref("i", "i32");
  const target = vb.letIn(body, "row", cast(vb.valueAt(body, idxId, delinearize(i, idxShape)), "i32"));
  const inRange = bin("and", bin("ge", target, i32(0)), lt(target, i32(rows)));
  const mine = parts === 1 ? undefined : bin("eq", select(inRange, mod(target, i32(parts)), i32(0)), j);
  const owned = new Scope(body);
  const updIdx: Idx = {
    dims: [...delinearize(i, idxShape).dims, ...delinearize(c, updShape.slice(idxShape.length)).dims],
    lin: add(mul(i, i32(cols)), c),
  };
  const u = vb.valueAt(owned, updId, updIdx);
  const at = add(mul(target, i32(cols)), c);
  const sum = add(cast(load(out, at, st), "f32"), cast(u, "f32"));
  owned.stmts.push(if_(inRange, [store(out, at, cast(sum, st))]));
  for (const root of k.roots) {
    if (root === sc.id) continue;
    vb.storeAt(owned, root, idxAtLinear(g, root, updIdx.lin!));
  }
  body.stmts.push(...(mine ? [if_(mine, owned.stmts)] : owned.stmts));
  top.stmts.push(for_("i", i32(0), i32(count), i32(1), body.stmts));
  return builtKernel(job, "scatter", vb, {
    shared: [],
    workgroupSize: 64,
    workgroups: Math.max(1, Math.ceil((cols * parts) / 64)),
    body: [if_(lt(gid, i32(cols * parts)), top.stmts)],
  });
}

const isFloatish = (t: string) => t === "f32" || t === "f16";

/** Does the kernel draw random numbers (a random_uniform read by a member, directly or through inline nodes)? */
function readsRandom(g: Graph, k: FusedKernel, ctx: ValueContext): boolean {
  const seen = new Set<NodeId>();
  const visit = (id: NodeId): boolean => {
    if (seen.has(id)) return false;
    seen.add(id);
    if (g.nodes[id].op === "random_uniform") return true;
    if (!k.members.has(id) && !ctx.computedAnywhere(id)) return false;
    return g.nodes[id].inputs.some(visit);
  };
  return [...k.members].some(visit);
}
