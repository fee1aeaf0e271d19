/**
 * GEMMs as library calls (DESIGN principle 5: on CUDA, cuBLASLt). For a fused kernel of kind "matmul",
 * decides whether its product can be one strided-batched `cublasLtMatmul` call and derives the call:
 * sizes, batch count and strides, per operand the plan buffer, element offset, stored dtype, leading
 * dimension and whether it is read transposed. Every refusal carries a reason, like fusion's decisions.
 *
 * The call is described row-major, the way our buffers are (runtime/cuda/cublaslt.ts maps it onto the
 * column-major library): for batch β < batch, D[β] (m×n) = op(A[β]) (m×k) · op(B[β]) (k×n) with
 *   op(X)[i][j] = X[offset + β·batchStride + (trans ? j·ld + i : i·ld + j)]
 * and D[β][i][j] = D[offset + β·batchStride + i·ld + j] (D is never transposed), f32 accumulation.
 *
 * An operand qualifies when it is a buffer read through reshapes, permutes, slices and value-preserving
 * casts, and that chain is a strided view: the two matrix axes have one unit stride between them, and the
 * batch axes collapse to one constant stride. The view is computed exactly from the index math those ops
 * lower to (index_math.ts), so e.g. attention's [B, H] batches read through a permute of a [B·S, H·D]
 * buffer qualify only when the strides collapse (B = 1, or S = 1), and are refused with the strides
 * otherwise.
 *
 * Casts: the template loads the stored value, widens it to f32 and applies the graph's casts; cuBLASLt
 * reads the stored value as is. They agree when every cast keeps the stored value: a cast to f32, or to
 * the stored dtype itself (an f16 buffer "cast to f16"). An f32 buffer rounded to f16/bf16 on load would
 * need cuBLASLt's CUBLAS_COMPUTE_32F_FAST_16F/_16BF to round the same way (to nearest even); NVIDIA's
 * documentation says only that these "allow automatic down-conversion" without naming the rounding, so
 * such operands are refused (they need an f16/bf16 copy of the buffer first).
 */
import { type DType, type Graph, type NodeId, numel } from "../../ir/mod.ts";
import type { FusedKernel } from "../fusion/types.ts";
import { storedTypeOf, type ValueContext } from "./values.ts";

export type GemmDType = "f32" | "f16" | "bf16";

/** One matrix of the call (see the file comment for the indexing). Offsets and strides count elements. */
export interface GemmOperand {
  readonly buffer: number;
  readonly offset: number;
  readonly dtype: GemmDType;
  readonly ld: number;
  readonly trans: boolean;
  readonly batchStride: number;
}

/** One cublasLtMatmul: D = op(A)·op(B), alpha 1, beta 0, f32 accumulation (CUBLAS_COMPUTE_32F). */
export interface GemmCall {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly batch: number;
  readonly a: GemmOperand;
  readonly b: GemmOperand;
  readonly d: GemmOperand;
  /** Always "32F": f32 accumulation of the stored operand values, as the template does. */
  readonly compute: "32F";
}

export type GemmVerdict =
  | {
    readonly ok: true;
    readonly m: number;
    readonly n: number;
    readonly k: number;
    readonly batch: number;
    readonly a: GemmOperand;
    readonly b: GemmOperand;
    /**
     * The root cuBLASLt writes directly (the epilogue is only "store the product, cast to its stored
     * dtype"); absent: the product goes to an f32 scratch buffer and an epilogue kernel does the rest.
     */
    readonly direct?: { readonly root: NodeId; readonly dtype: GemmDType };
  }
  | { readonly ok: false; readonly reason: string };

const GEMM_TYPES: readonly DType[] = ["f32", "f16", "bf16"];

/** A strided view of a buffer: element (i0, i1, …) is at offset + Σ i_d·strides[d]. */
interface View {
  readonly shape: readonly number[];
  readonly strides: readonly number[];
  readonly offset: number;
}

const contiguous = (shape: readonly number[]): View => {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    strides[d] = s;
    s *= shape[d];
  }
  return { shape, strides, offset: 0 };
};

/**
 * The view `reshape` makes of `v` (row-major linear order kept), or undefined when it is not a strided
 * view: each group of input axes that maps onto a group of output axes must be contiguous within itself.
 */
export function reshapeView(v: View, outShape: readonly number[]): View | undefined {
  const ins = v.shape.map((s, i) => [s, v.strides[i]] as const).filter(([s]) => s !== 1);
  const strides = new Array<number>(outShape.length);
  let i = 0, d = 0;
  while (d < outShape.length) {
    if (outShape[d] === 1) {
      strides[d] = 0;
      d++;
      continue;
    }
    if (i >= ins.length) return undefined;
    let j = i, e = d, pi = ins[i][0], pe = outShape[d];
    while (pi !== pe) {
      if (pi < pe) {
        if (++j >= ins.length) return undefined;
        pi *= ins[j][0];
      } else {
        if (++e >= outShape.length) return undefined;
        pe *= outShape[e];
      }
    }
    for (let t = i; t < j; t++) if (ins[t][1] !== ins[t + 1][1] * ins[t + 1][0]) return undefined;
    let st = ins[j][1];
    for (let t = e; t >= d; t--) {
      strides[t] = st;
      st *= outShape[t];
    }
    i = j + 1;
    d = e + 1;
  }
  return { shape: outShape, strides, offset: v.offset };
}

type Found = { ok: true; buffer: NodeId; dtype: GemmDType; view: View } | { ok: false; reason: string };

/** The buffer and strided view operand `id` of the GEMM reads, or why it is not one. */
function operandView(g: Graph, ctx: ValueContext, id: NodeId, what: string): Found {
  const chain: NodeId[] = [];
  let cur = id;
  while (ctx.members.has(cur) || ctx.computedAnywhere(cur)) {
    const n = g.nodes[cur];
    if (!["cast", "reshape", "permute", "slice"].includes(n.op)) {
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
  let view = contiguous(g.nodes[cur].type.shape);
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
    }
  }
  return { ok: true, buffer: cur, dtype: stored as GemmDType, view };
}

/**
 * Batch axes as one stride: size-1 axes drop out, and an outer axis merges into the next inner one when
 * its stride is the inner axis's extent times its stride. Undefined when more than one axis remains.
 */
function batchStride(shape: readonly number[], strides: readonly number[]): number | undefined {
  const axes = shape.map((s, d) => [s, strides[d]] as const).filter(([s]) => s !== 1);
  if (axes.length === 0) return 0;
  let [size, stride] = axes[axes.length - 1];
  for (let d = axes.length - 2; d >= 0; d--) {
    if (axes[d][1] !== size * stride) return undefined;
    size *= axes[d][0];
  }
  return stride;
}

/**
 * The operand as the call's matrix: rows × cols logical (op(X)), `swap` when the tensor's last two axes
 * are [cols, rows] (the matmul's transpose attribute).
 */
function asMatrix(
  f: Extract<Found, { ok: true }>,
  rows: number,
  cols: number,
  swap: boolean,
  ctx: ValueContext,
  what: string,
): GemmOperand | string {
  const { shape, strides, offset } = f.view;
  const r = shape.length;
  const si = swap ? strides[r - 1] : strides[r - 2];
  const sj = swap ? strides[r - 2] : strides[r - 1];
  const bs = batchStride(shape.slice(0, r - 2), strides.slice(0, r - 2));
  if (bs === undefined) {
    return `${what}: batch axes [${shape.slice(0, r - 2).join(", ")}] have strides [${
      strides.slice(0, r - 2).join(", ")
    }], which do not collapse to one stride`;
  }
  if (bs === 0 && numel(shape.slice(0, r - 2)) > 1) return `${what}: broadcast over the batch (stride 0)`;
  const base = { buffer: ctx.bufferOf(f.buffer), offset, dtype: f.dtype, batchStride: bs };
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
 * Whether the product `root` stores is the matmul's accumulator up to the final rounding to `root`'s
 * stored dtype: a chain of reshapes and casts (to f32, or to that stored dtype) from the matmul.
 */
function directRoot(g: Graph, k: FusedKernel, ctx: ValueContext): NodeId | undefined {
  if (k.roots.length !== 1) return undefined;
  const root = k.roots[0];
  const stored = storedTypeOf(ctx, root);
  let cur = root;
  while (cur !== k.anchor) {
    const n = g.nodes[cur];
    if (!k.members.has(cur)) return undefined;
    if (n.op === "cast") {
      const to = n.attrs.to as DType;
      if (to !== "f32" && to !== stored) return undefined;
    } else if (n.op !== "reshape") {
      return undefined;
    }
    cur = n.inputs[0];
  }
  return root;
}

/** Output types cuBLASLt pairs with each operand type under CUBLAS_COMPUTE_32F (cublasLtMatmul's table). */
const D_TYPES: Record<GemmDType, readonly DType[]> = {
  f32: ["f32"],
  f16: ["f16", "f32"],
  bf16: ["bf16", "f32"],
};

export function deriveGemm(g: Graph, k: FusedKernel, ctx: ValueContext): GemmVerdict {
  if (k.kind !== "matmul" || k.anchor === undefined) return { ok: false, reason: `a ${k.kind} kernel` };
  const mm = g.nodes[k.anchor];
  const [aId, bId] = mm.inputs;
  const aShape = g.nodes[aId].type.shape;
  const r = aShape.length;
  const ta = mm.attrs.transpose_a as boolean, tb = mm.attrs.transpose_b as boolean;
  const m = ta ? aShape[r - 1] : aShape[r - 2];
  const kk = ta ? aShape[r - 2] : aShape[r - 1];
  const n = mm.type.shape[r - 1];
  const batch = numel(aShape.slice(0, r - 2));
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
  const a = asMatrix(fa, m, kk, ta, ctx, "A");
  if (typeof a === "string") return { ok: false, reason: a };
  const b = asMatrix(fb, kk, n, tb, ctx, "B");
  if (typeof b === "string") return { ok: false, reason: b };
  const root = directRoot(g, k, ctx);
  const rootType = root === undefined ? undefined : storedTypeOf(ctx, root);
  const direct = root !== undefined && rootType && D_TYPES[fa.dtype].includes(rootType)
    ? { root, dtype: rootType as GemmDType }
    : undefined;
  return { ok: true, m, n, k: kk, batch, a, b, ...(direct ? { direct } : {}) };
}

/** D's operand: a contiguous [batch, m, n] buffer. */
export function outputOperand(
  buffer: number,
  dtype: GemmDType,
  m: number,
  n: number,
): GemmOperand {
  return { buffer, offset: 0, dtype, ld: n, trans: false, batchStride: m * n };
}
