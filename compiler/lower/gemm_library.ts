/**
 * GEMMs as library calls (DESIGN principle 5: on CUDA, cuBLASLt). For a fused kernel of kind "matmul",
 * decides whether its product can be one strided-batched `cublasLtMatmul` call (in `outer` groups where two
 * batch levels do not collapse) and derives it: sizes, batch count and strides, per operand the plan buffer,
 * offset, stored dtype, leading dimension and transposition, computed exactly from the index math. Every
 * refusal carries a reason. Casts that round on load are refused (why, and the output: DESIGN.md, notes:
 * compiler/lower/gemm_library.ts).
 */
import { type DType, type Graph, type NodeId, numel } from "../../ir/mod.ts";
import type { FusedKernel } from "../fusion/types.ts";
import { READ_THROUGH } from "../passes/gemm_calls.ts";
import { keepsElements } from "../passes/gemm_sum_order.ts";
import { contiguousView, reshapeView, type View } from "../graph/strided_view.ts";
import { storedTypeOf, type ValueContext } from "./values.ts";
import type { PlanGemm, PlanGemmOperand, PlanGemmVector } from "../../plan/plan.ts";

export type GemmDType = "f32" | "f16" | "bf16";

/** A call's sizes, batch and A and B operands: the plan's call without D, C and an epilogue. */
export type GemmShape = Pick<PlanGemm, "m" | "n" | "k" | "batch" | "outer" | "a" | "b">;

export type GemmVerdict =
  | GemmShape & {
    readonly ok: true;
    /**
     * The root cuBLASLt writes directly (the epilogue is only "store the product, cast to its stored
     * dtype", through reshapes and permutes) and D's operand for it; absent: the product goes to an f32
     * scratch buffer (D from `outputOperand`, batched like A and B) and an epilogue kernel does the rest.
     */
    readonly direct?: {
      readonly root: NodeId;
      readonly dtype: GemmDType;
      readonly d: PlanGemmOperand;
      /** The root is the product plus this bias (cuBLASLt's BIAS epilogue). */
      readonly bias?: PlanGemmVector;
      /** The product's columns are this many heads, one batch entry each (`headsCall`). */
      readonly heads?: number;
      /** The root is the product plus this stored tensor, read as C with beta 1 (laid out as D). */
      readonly c?: PlanGemmOperand;
    };
    /** Without `direct`: the scratch product's batch strides (inner, between groups) under the plan. */
    readonly scratchBatch?: { readonly inner: number; readonly outer: number };
    /** Without `direct`: the scratch product's dtype (see `scratchType`). */
    readonly scratchDtype?: GemmDType;
  }
  | { readonly ok: false; readonly reason: string };

const GEMM_TYPES: readonly DType[] = ["f32", "f16", "bf16"];

type Found = { ok: true; buffer: NodeId; dtype: GemmDType; view: View } | { ok: false; reason: string };

/**
 * The buffer and strided view operand `id` of the GEMM reads, or why it is not one. `broadcasts`: a
 * broadcast on the way is a view too (stride 0 along the axes it expands), which only a bias may use.
 */
function operandView(g: Graph, ctx: ValueContext, id: NodeId, what: string, broadcasts = false): Found {
  const chain: NodeId[] = [];
  let cur = id;
  // What gemm-calls let a call read through (READ_THROUGH), and for a bias a broadcast.
  const through = (op: string) => READ_THROUGH.has(op) || (broadcasts && op === "broadcast");
  while (ctx.members.has(cur) || ctx.computedAnywhere(cur)) {
    const n = g.nodes[cur];
    if (!through(n.op)) {
      return {
        ok: false,
        reason: `${what} is computed on load (${n.op}), not a buffer read through reshape/permute/slice/cast`,
      };
    }
    chain.push(cur);
    cur = n.inputs[0];
  }
  const stored = storedTypeOf(ctx, cur);
  if (!GEMM_TYPES.includes(stored)) return { ok: false, reason: `${what} is stored ${stored}` };
  let view = contiguousView(g.nodes[cur].type.shape);
  for (const c of chain.reverse()) {
    const n = g.nodes[c];
    switch (n.op) {
      case "cast": {
        const to = n.attrs.to as DType;
        if (to !== "f32" && to !== stored) {
          return {
            ok: false,
            reason: `${what} is stored ${stored} and rounded to ${to} on load (cuBLASLt's FAST_16F/16BF ` +
              `rounding is undocumented; needs a copy in ${to})`,
          };
        }
        break;
      }
      case "reshape": {
        const r = reshapeView(view, n.type.shape);
        if (!r) return { ok: false, reason: `${what}: a reshape of a non-contiguous view` };
        view = r;
        break;
      }
      case "permute": {
        const perm = n.attrs.perm as number[];
        // Result axis d is operand axis perm[d] (index_math.ts permuteOperand).
        view = { shape: n.type.shape, strides: perm.map((p) => view.strides[p]), offset: view.offset };
        break;
      }
      case "slice": {
        const start = n.attrs.start as number[];
        view = {
          shape: n.type.shape,
          strides: view.strides,
          offset: view.offset + start.reduce((a, s, d) => a + s * view.strides[d], 0),
        };
        break;
      }
      case "broadcast": {
        // numpy rules (ir/ops.ts): dims aligned right; a missing or size-1 dim that grows has stride 0.
        const out = n.type.shape, lead = out.length - view.shape.length;
        const v = view;
        view = {
          shape: out,
          strides: out.map((
            s,
            d,
          ) => (d < lead || (v.shape[d - lead] === 1 && s !== 1) ? 0 : v.strides[d - lead])),
          offset: v.offset,
        };
        break;
      }
    }
  }
  return { ok: true, buffer: cur, dtype: stored as GemmDType, view };
}

/** The batch axes of one operand: sizes (the same for A, B and D) and this operand's strides. */
type BatchAxes = { readonly shape: readonly number[]; readonly strides: readonly number[] };

/**
 * Axes `order` (outermost first) as one stride: an outer axis merges into the next inner one when its
 * stride is the inner axis's extent times its stride. Undefined when they do not merge.
 */
function collapse(b: BatchAxes, order: readonly number[]): number | undefined {
  if (order.length === 0) return 0;
  const stride = b.strides[order[order.length - 1]];
  let size = b.shape[order[order.length - 1]];
  for (let t = order.length - 2; t >= 0; t--) {
    if (b.strides[order[t]] !== size * stride) return undefined;
    size *= b.shape[order[t]];
  }
  return stride;
}

/** Every ordering of `xs` (at most 4! = 24 for the batch ranks that occur), in lexicographic order. */
function permutations(xs: readonly number[]): number[][] {
  if (xs.length <= 1) return [[...xs]];
  return xs.flatMap((x, i) => permutations([...xs.slice(0, i), ...xs.slice(i + 1)]).map((p) => [x, ...p]));
}

/** How the batch runs: groups of `batch / outer` strided entries; per operand the two strides. */
interface BatchPlan {
  readonly outer: number;
  readonly strides: readonly { readonly inner: number; readonly outer: number }[];
}

/**
 * The batch plan with the fewest groups for operands sharing the batch shape: the size-1 axes drop
 * out; the others are taken in some order (the same for every operand) and split once into outer and
 * inner axes, each of which must collapse to one stride in every operand. The first plan found with
 * the fewest groups (orders in lexicographic order, more inner axes first), so the choice is
 * deterministic; one group when the axes collapse as they are. A broadcast (stride 0) is refused
 * where a whole group of axes does not broadcast (cuBLASLt's strided batch takes one stride).
 */
function planBatch(
  shape: readonly number[],
  operands: readonly (readonly number[])[],
  broadcastOk: readonly boolean[] = [],
): BatchPlan | undefined {
  const axes = shape.map((_, d) => d).filter((d) => shape[d] !== 1);
  let best: BatchPlan | undefined;
  for (const order of permutations(axes)) {
    for (let split = 0; split <= order.length; split++) {
      const outerAxes = order.slice(0, split), innerAxes = order.slice(split);
      const outer = outerAxes.reduce((a, d) => a * shape[d], 1);
      if (best && outer >= best.outer) continue;
      const strides = operands.map((st, i) => {
        const b = { shape, strides: st };
        const inner = collapse(b, innerAxes), out = collapse(b, outerAxes);
        // A group of several entries at one address (stride 0) is a broadcast: refused, except for an
        // operand the caller allows it (an input shared by every head of a head split; never D).
        if (!broadcastOk[i] && (inner === 0 && innerAxes.length > 0 || out === 0 && outerAxes.length > 0)) {
          return undefined;
        }
        return inner === undefined || out === undefined ? undefined : { inner, outer: out };
      });
      if (strides.some((x) => x === undefined)) continue;
      best = { outer, strides: strides as BatchPlan["strides"] };
    }
  }
  return best;
}

/**
 * The operand as the call's matrix: rows × cols logical (op(X)), `swap` when the tensor's last two axes
 * are [cols, rows] (the matmul's transpose attribute); batch strides from the batch plan.
 */
function asMatrix(
  view: View,
  buffer: number,
  dtype: GemmDType,
  rows: number,
  cols: number,
  swap: boolean,
  batch: { readonly inner: number; readonly outer: number },
  grouped: boolean,
  what: string,
): PlanGemmOperand | string {
  const { strides, offset } = view;
  const r = strides.length;
  const si = swap ? strides[r - 1] : strides[r - 2];
  const sj = swap ? strides[r - 2] : strides[r - 1];
  const base = {
    buffer,
    offset,
    dtype,
    batchStride: batch.inner,
    ...(grouped ? { outerStride: batch.outer } : {}),
  };
  // Row-major (unit stride along a row) or column-major (unit stride down a column); a size-1 axis has
  // any stride. The leading dimension must be at least the contiguous extent (cuBLASLt's rule too).
  if ((cols === 1 || sj === 1) && (rows === 1 || si >= cols)) {
    return { ...base, trans: false, ld: rows === 1 ? cols : si };
  }
  if ((rows === 1 || si === 1) && (cols === 1 || sj >= rows)) {
    return { ...base, trans: true, ld: cols === 1 ? rows : sj };
  }
  return `${what}: strides [${si}, ${sj}] of its matrix axes have no unit stride`;
}

/**
 * The root the call can write itself: the kernel's one root, reached from the matmul through reshapes,
 * permutes and casts that keep the value up to the final rounding to the root's stored dtype (to f32,
 * or to that stored dtype), with the view of the root's buffer in the product's coordinates. With
 * `biasAdd`, at most one `add` may sit on the way while the values are still in the product's
 * coordinates (only value-keeping casts between it and the matmul): its other operand is the candidate
 * bias (`bias`), which cuBLASLt's BIAS epilogue adds to the f32 accumulator before the one rounding, as
 * the template kernel does. With `sumC`, the root itself may be an add of the chain and a buffer of the
 * root's shape (compiler/fusion/sums_into_gemms.ts), read at the root's own elements: cuBLASLt's C, laid out as
 * D (then no bias).
 */
function directRoot(
  g: Graph,
  k: FusedKernel,
  ctx: ValueContext,
  biasAdd: boolean,
  sumC = false,
): { root: NodeId; view: View; bias?: NodeId; heads?: readonly [number, number]; c?: NodeId } | undefined {
  if (k.roots.length !== 1) return undefined;
  const root = k.roots[0];
  const stored = storedTypeOf(ctx, root);
  let cur = root;
  let c: NodeId | undefined;
  let view: View | undefined = contiguousView(g.nodes[root].type.shape);
  let bias: NodeId | undefined;
  // The product's columns split as [H, Dh] by a reshape whose view does not merge back (see deriveGemm).
  let heads: readonly [number, number] | undefined;
  // Whether a reshape or permute was passed since the add (walking down, toward the matmul: none may be).
  let moved = false;
  const fromAnchor = (id: NodeId): boolean =>
    id === k.anchor || (k.members.has(id) && g.nodes[id].inputs.some(fromAnchor));
  const r = g.nodes[root];
  if (sumC && r.op === "add" && r.inputs[0] !== r.inputs[1]) {
    const y = fromAnchor(r.inputs[0]) ? r.inputs[1] : r.inputs[0];
    // A buffer read through reshapes and casts to f32 (the stored value widened, as the template loads
    // it): its row-major elements are the root's, so C is laid out as D.
    let at = y;
    const computed = (id: NodeId) => k.members.has(id) || ctx.computedAnywhere(id);
    while (computed(at) && keepsElements(g, at)) at = g.nodes[at].inputs[0];
    if (!computed(at) && !fromAnchor(y) && numel(g.nodes[at].type.shape) === numel(r.type.shape)) {
      c = at;
      cur = y === r.inputs[0] ? r.inputs[1] : r.inputs[0];
      biasAdd = false;
    }
  }
  while (cur !== k.anchor) {
    const n = g.nodes[cur];
    if (!k.members.has(cur)) return undefined;
    if (n.op === "add" && biasAdd && bias === undefined) {
      const [x, y] = n.inputs;
      const onChain = fromAnchor(x) ? x : y, other = onChain === x ? y : x;
      if (fromAnchor(other)) return undefined;
      bias = other;
      moved = false;
      cur = onChain;
      continue;
    }
    const inShape = g.nodes[n.inputs[0]].type.shape;
    if (n.op === "reshape" || n.op === "permute") {
      // Below the head split the view is in the split coordinates, not the input's: nothing may move.
      if (heads) return undefined;
      moved = true;
    }
    if (n.op === "cast") {
      const to = n.attrs.to as DType;
      if (to !== "f32" && to !== stored) return undefined;
    } else if (n.op === "reshape") {
      // The same elements in the input's shape (a reshape keeps the row-major order both ways).
      const merged = reshapeView(view, inShape);
      if (merged) {
        view = merged;
      } else {
        // Attention's heads-major store: [.., n] reshaped to [.., H, Dh] and permuted, whose columns do not
        // merge back. The view in the input's coordinates with its last axis split as [H, Dh] still exists.
        const out = n.type.shape, cols = inShape[inShape.length - 1];
        const hd = [out[out.length - 2], out[out.length - 1]] as const;
        if (out.length < 2 || hd[0] * hd[1] !== cols || hd[0] === 1 || hd[1] === 1) return undefined;
        view = reshapeView(view, [...inShape.slice(0, -1), ...hd]);
        if (!view) return undefined;
        heads = hd;
      }
    } else if (n.op === "permute") {
      // Result axis d is input axis perm[d]: the input's axis p has the stride of the result axis naming it.
      const perm = n.attrs.perm as number[];
      const strides = new Array<number>(inShape.length);
      perm.forEach((p, d) => strides[p] = view!.strides[d]);
      view = { shape: inShape, strides, offset: view.offset };
    } else {
      return undefined;
    }
    cur = n.inputs[0];
  }
  if (bias !== undefined && moved) return undefined;
  // C in the heads-major layout would need its own split; no plan has one.
  if (c !== undefined && heads) return undefined;
  return {
    root,
    view,
    ...(bias !== undefined ? { bias } : {}),
    ...(heads ? { heads } : {}),
    ...(c !== undefined ? { c } : {}),
  };
}

/**
 * Bias types a BIAS epilogue takes per D type. cublasLt.h documents the bias as "the same type as the
 * elements of output matrix (Dtype)", with exceptions only for integer and FP8 kernels, so an f32 bias
 * on an f16/bf16 D (BERT's biases are f32 master weights; its Q/K/V projections store f16) is left to
 * the epilogue kernel until a GPU shows cuBLASLt finds algorithms for it (BIAS_DATA_TYPE = CUDA_R_32F):
 * then f16: ["f16", "f32"] takes BERT-large inference at batch 1 from 1.27 to 1.07 ms predicted (its 72
 * heads-major projections need no kernel). A heuristic miss would run the template GEMM instead.
 */
const LT_BIAS_TYPES: Record<GemmDType, readonly GemmDType[]> = { f32: ["f32"], f16: ["f16"], bf16: ["bf16"] };

/**
 * Whether an epilogue vector stored `bias` goes with a D stored `d` (LT_BIAS_TYPES). cublasLt.h documents
 * BIAS_DATA_TYPE as the type "of the bias or bias gradient vector", so a bias gradient (gemm_bgrad.ts)
 * follows the same rule.
 */
export function biasTypeFits(d: GemmDType, bias: string): boolean {
  return (LT_BIAS_TYPES[d] as readonly string[]).includes(bias);
}

/**
 * The bias of a BIAS epilogue: node `id` read as a packed vector over the product's columns, the same
 * for every row and batch entry (a linear layer's bias broadcast over the tokens), stored in a type
 * cuBLASLt pairs with D's (`LT_BIAS_TYPES`; BIAS_DATA_TYPE is set explicitly). Undefined otherwise.
 */
export function biasVectorOf(
  g: Graph,
  ctx: ValueContext,
  id: NodeId,
  productShape: readonly number[],
  dDtype: GemmDType,
): PlanGemmVector | undefined {
  const f = operandView(g, ctx, id, "bias", true);
  if (!f.ok || !LT_BIAS_TYPES[dDtype].includes(f.dtype)) return undefined;
  const { shape, strides, offset } = f.view;
  const r = productShape.length;
  if (shape.length !== r || shape.some((s, d) => s !== productShape[d])) return undefined;
  if (strides.slice(0, r - 1).some((s) => s !== 0)) return undefined;
  if (productShape[r - 1] > 1 && strides[r - 1] !== 1) return undefined;
  return { buffer: ctx.bufferOf(f.buffer), offset, dtype: f.dtype, batchStride: 0 };
}

/** Output types cuBLASLt pairs with each operand type under CUBLAS_COMPUTE_32F (cublasLtMatmul's table). */
const D_TYPES: Record<GemmDType, readonly DType[]> = {
  f32: ["f32"],
  f16: ["f16", "f32"],
  bf16: ["bf16", "f32"],
};

/**
 * The dtype of the scratch product an epilogue kernel reads: the matmul node's own dtype when that is
 * f16/bf16 and cuBLASLt can write it from these operands (CUBLAS_COMPUTE_32F, D of the operands' type).
 * The graph rounds such a product to its dtype anyway (the reference interpreter stores a matmul in its
 * dtype), so cuBLASLt's one rounding of the f32 accumulator is the graph's own and the epilogue reads
 * the value the graph defines, in half the bytes of an f32 scratch. Otherwise f32 (an f32 product, or
 * operands cuBLASLt cannot pair with the node's dtype).
 */
export function scratchType(product: DType, operands: GemmDType): GemmDType {
  return (product === "f16" || product === "bf16") && D_TYPES[operands].includes(product) ? product : "f32";
}

/**
 * On CUDA a group is one more cublasLtMatmul; the other way to write a root the batch cannot reach in
 * one group is a scratch product and an epilogue kernel, which costs one launch and the product's
 * write and read (`scratchBytes` per element: 2 for an f16/bf16 scratch, 4 for f32). Groups win while
 * (groups − 1) launches cost less than that: with the H100 profile's 2 µs launches and 3.0 TB/s
 * (compiler/targets/h100.ts), for 2·b·N/3e12 + 2e-6 ≥ (G − 1)·2e-6, i.e. G ≤ 2 + N/750,000 for N product
 * elements of an f32 scratch (b = 4), G ≤ 2 + N/1,500,000 for an f16 one. BERT-large's attention at
 * batch 8 (N = 1 Mi, G = 8 for a token-major result) takes the epilogue; batch 1 (G = 1) writes
 * directly. The rule depends on shapes only, so compiled output never depends on the machine.
 */
export function directGroupsPay(groups: number, elements: number, scratchBytes = 4): boolean {
  const LAUNCH = 2e-6, BANDWIDTH = 3.0e12;
  return (groups - 1) * LAUNCH <= LAUNCH + (2 * scratchBytes * elements) / BANDWIDTH;
}

/**
 * The call for a product whose columns the root splits into heads (directRoot's `heads` [H, Dh]):
 * attention's Q, K and V projections stored heads-major, [S, H·Dh] → [H, S, Dh]. Head h of the product is
 * op(A)·op(B)[:, h·Dh ..] (Dh columns), so the heads are one more batch axis, innermost: A is the same
 * for every head (batch stride 0, which a strided batch allows), B steps by Dh columns, D by the root's
 * head stride, a bias by Dh. One group only (the bias vector is stepped per batch entry, not per group);
 * undefined where the strides do not fit, and the scratch path stands.
 */
function headsCall(
  shape: {
    readonly m: number;
    readonly n: number;
    readonly k: number;
    readonly ta: boolean;
    readonly tb: boolean;
    readonly batchShape: readonly number[];
    readonly heads: readonly [number, number];
  },
  fa: Extract<Found, { ok: true }>,
  fb: Extract<Found, { ok: true }>,
  root: View,
  bufferOf: (id: NodeId) => number,
  rootBuffer: number,
  rootType: GemmDType,
): { call: Omit<PlanGemm, "d" | "compute">; d: PlanGemmOperand } | undefined {
  const { m, k, ta, tb, batchShape, heads: [h, dh] } = shape;
  const r = batchShape.length + 2;
  const insert = (xs: readonly number[], at: number, x: number) => [...xs.slice(0, at), x, ...xs.slice(at)];
  // A: the head axis inserted before the matrix axes, stride 0.
  const a: View = {
    shape: insert(fa.view.shape, r - 2, h),
    strides: insert(fa.view.strides, r - 2, 0),
    offset: fa.view.offset,
  };
  // B: its n axis (the last, or the one before it when B is read transposed) becomes Dh, the head axis
  // steps Dh columns.
  const nAx = tb ? r - 2 : r - 1;
  const bShape = fb.view.shape.map((s, d) => (d === nAx ? dh : s));
  const b: View = {
    shape: insert(bShape, r - 2, h),
    strides: insert(fb.view.strides, r - 2, dh * fb.view.strides[nAx]),
    offset: fb.view.offset,
  };
  // D: the root's view over [..batch, m, H, Dh], the head axis moved before m.
  const rs = root.strides;
  const d: View = {
    shape: [...batchShape, h, m, dh],
    strides: [...rs.slice(0, r - 2), rs[r - 1], rs[r - 2], rs[r]],
    offset: root.offset,
  };
  const batch2 = [...batchShape, h];
  const p = planBatch(batch2, [a, b, d].map((v) => v.strides.slice(0, r - 1)), [true, true, false]);
  if (!p || p.outer > 1) return undefined;
  const oa = asMatrix(a, bufferOf(fa.buffer), fa.dtype, m, k, ta, p.strides[0], false, "A");
  const ob = asMatrix(b, bufferOf(fb.buffer), fb.dtype, k, dh, tb, p.strides[1], false, "B");
  const od = asMatrix(d, rootBuffer, rootType, m, dh, false, p.strides[2], false, "D");
  if (typeof oa === "string" || typeof ob === "string" || typeof od === "string" || od.trans) {
    return undefined;
  }
  return { call: { m, n: dh, k, batch: numel(batch2), a: oa, b: ob }, d: od };
}

/**
 * `opts.biasEpilogue`: a root that is the product plus a bias vector may be written directly with
 * cuBLASLt's BIAS epilogue (CUDA only: the CPU's BLAS call has no epilogue, so a compile for the C
 * backend leaves it off). `opts.sumC`: a root that is the product plus a stored tensor of D's layout and
 * dtype may be written directly with that tensor as C, beta 1 (CUDA, fusion/sums_into_gemms.ts).
 * `opts.groupsFree`: groups cost nothing (the CPU's BLAS runs an sgemm per batch entry): written directly.
 */
export function deriveGemm(
  g: Graph,
  k: FusedKernel,
  ctx: ValueContext,
  opts: { readonly biasEpilogue?: boolean; readonly sumC?: boolean; readonly groupsFree?: boolean } = {},
): GemmVerdict {
  if (k.kind !== "matmul" || k.anchor === undefined) return { ok: false, reason: `a ${k.kind} kernel` };
  const mm = g.nodes[k.anchor];
  const [aId, bId] = mm.inputs;
  const aShape = g.nodes[aId].type.shape;
  const r = aShape.length;
  const ta = mm.attrs.transpose_a as boolean, tb = mm.attrs.transpose_b as boolean;
  const m = ta ? aShape[r - 1] : aShape[r - 2];
  const kk = ta ? aShape[r - 2] : aShape[r - 1];
  const n = mm.type.shape[r - 1];
  const batchShape = mm.type.shape.slice(0, r - 2);
  const batch = numel(batchShape);
  for (const root of k.roots) {
    if (numel(g.nodes[root].type.shape) !== numel(mm.type.shape)) {
      return { ok: false, reason: "an epilogue root differs in size from the product" };
    }
  }
  const fa = operandView(g, ctx, aId, "A");
  if (!fa.ok) return fa;
  const fb = operandView(g, ctx, bId, "B");
  if (!fb.ok) return fb;
  if (fa.dtype !== fb.dtype) {
    return {
      ok: false,
      reason: `A is stored ${fa.dtype} and B ${fb.dtype} (cuBLASLt takes one type for both; needs a copy)`,
    };
  }
  // The operands have the product's batch axes (ir/ops.ts matmul).
  const batchStrides = (v: View) => v.strides.slice(0, r - 2);
  const ab = planBatch(batchShape, [batchStrides(fa.view), batchStrides(fb.view)]);
  if (!ab) {
    const why = fa.view.strides.slice(0, r - 2).join(", ") + "] and B [" + batchStrides(fb.view).join(", ");
    return {
      ok: false,
      reason: `batch axes [${batchShape.join(", ")}] have strides A [${why}], which no split into two ` +
        `strides covers`,
    };
  }
  const scratchD = contiguousView(mm.type.shape);
  const scratchDtype = scratchType(mm.type.dtype, fa.dtype);
  const found = directRoot(g, k, ctx, opts.biasEpilogue ?? false, opts.sumC ?? false);
  const rootType = found === undefined ? undefined : storedTypeOf(ctx, found.root);
  // cuBLASLt takes C in D's type; otherwise the epilogue kernel adds it.
  const cFits = found?.c === undefined || storedTypeOf(ctx, found.c) === rootType;
  const bias = found?.bias === undefined || rootType === undefined || !GEMM_TYPES.includes(rootType)
    ? undefined
    : biasVectorOf(g, ctx, found.bias, mm.type.shape, rootType as GemmDType);
  const canDirect = found !== undefined && rootType !== undefined && D_TYPES[fa.dtype].includes(rootType) &&
    (found.bias === undefined || bias !== undefined) && cFits;
  const operands = (d: View) => {
    const p = planBatch(batchShape, [batchStrides(fa.view), batchStrides(fb.view), batchStrides(d)]);
    if (!p) return undefined;
    const grouped = p.outer > 1;
    const a = asMatrix(fa.view, ctx.bufferOf(fa.buffer), fa.dtype, m, kk, ta, p.strides[0], grouped, "A");
    const b = asMatrix(fb.view, ctx.bufferOf(fb.buffer), fb.dtype, kk, n, tb, p.strides[1], grouped, "B");
    return { p, a, b };
  };
  // The call's sizes, batch and operands under batch plan `p`.
  const call = (p: BatchPlan, a: PlanGemmOperand, b: PlanGemmOperand) =>
    ({ m, n, k: kk, batch, ...(p.outer > 1 ? { outer: p.outer } : {}), a, b }) as const;
  if (canDirect && found.heads) {
    const split = headsCall(
      { m, n, k: kk, ta, tb, batchShape, heads: found.heads },
      fa,
      fb,
      found.view,
      (f) => ctx.bufferOf(f),
      ctx.bufferOf(found.root),
      rootType as GemmDType,
    );
    if (split) {
      return {
        ok: true,
        ...split.call,
        direct: {
          root: found.root,
          dtype: rootType as GemmDType,
          d: split.d,
          heads: found.heads[0],
          ...(bias ? { bias: { ...bias, batchStride: found.heads[1] } } : {}),
        },
      };
    }
  }
  if (canDirect && !found.heads) {
    const o = operands(found.view);
    if (
      o && typeof o.a !== "string" && typeof o.b !== "string" &&
      (opts.groupsFree || directGroupsPay(o.p.outer, batch * m * n, scratchDtype === "f32" ? 4 : 2))
    ) {
      const dBuffer = ctx.bufferOf(found.root), dType = rootType as GemmDType;
      let d = asMatrix(found.view, dBuffer, dType, m, n, false, o.p.strides[2], o.p.outer > 1, "D");
      if (typeof d !== "string" && !d.trans) {
        // One product: its batch stride is never read; m·n as a scratch product's, so plans that have no
        // batch keep the descriptor they had.
        if (batch === 1) d = { ...d, batchStride: m * n };
        // C: D's view of the summed buffer (it is read at the root's own elements).
        const c = found.c === undefined ? undefined : { ...d, buffer: ctx.bufferOf(found.c) };
        return {
          ok: true,
          ...call(o.p, o.a, o.b),
          direct: {
            root: found.root,
            dtype: rootType as GemmDType,
            d,
            ...(bias ? { bias } : {}),
            ...(c ? { c } : {}),
          },
        };
      }
    }
  }
  // A contiguous product's batch strides collapse in the product's own order, so the plan that A and
  // B allowed above still stands (planBatch keeps the first plan with the fewest groups).
  const o = operands(scratchD);
  if (!o) return { ok: false, reason: "the product's batch axes do not follow A's and B's split" };
  if (typeof o.a === "string") return { ok: false, reason: o.a };
  if (typeof o.b === "string") return { ok: false, reason: o.b };
  return { ok: true, ...call(o.p, o.a, o.b), scratchBatch: o.p.strides[2], scratchDtype };
}

/**
 * D's operand for the scratch product: a contiguous [batch…, m, n] buffer, batched like A and B (one
 * group: `batch` entries m·n apart; in groups: the batch plan's strides of the contiguous product).
 */
export function outputOperand(
  buffer: number,
  dtype: GemmDType,
  m: number,
  n: number,
  grouped?: { readonly inner: number; readonly outer: number },
): PlanGemmOperand {
  const base = { buffer, offset: 0, dtype, ld: n, trans: false };
  if (!grouped) return { ...base, batchStride: m * n };
  return { ...base, batchStride: grouped.inner, outerStride: grouped.outer };
}
