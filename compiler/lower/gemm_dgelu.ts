/**
 * The GELU gradient as cuBLASLt's DGELU epilogue (issue 16 item 1). In a linear layer's backward through a
 * tanh-form GELU, dP = (dY·W2ᵀ) ⊙ GELU'(P): the GEMM kernel computing dY·W2ᵀ ends in that product with
 * GELU'(P) of the stored pre-activation P (compiler/fusion/gelu_aux.ts makes P a root). As a library call
 * that is a scratch product and an epilogue kernel reading it back; CUBLASLT_EPILOGUE_DGELU ("apply GELU
 * gradient to matmul output, store GELU gradient in the output matrix"; it needs "an extra input", the
 * GELU input matrix at CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER) computes it in the call: D = acc ⊙
 * GELU'(aux), with cuBLASLt's GELU, the tanh form (compiler/lower/gemm_gelu.ts). No epilogue kernel.
 *
 * Taken where, exactly:
 * - the kernel's one root is D·GELU'(P) for the tanh-form GELU (gemm_gelu.ts tanhGeluGradient), D the
 *   kernel's product through reshapes and casts to f32 (the same elements in the same row-major order),
 *   P a node the kernel loads (stored by another kernel), of the root's shape;
 * - the call is one product (batch 1): cuBLASLt's aux has a batch stride, but plans need none;
 * - P is stored in D's type: cublasLt.h, EPILOGUE_AUX_POINTER: "GELU input matrix elements type is the same
 *   as the type of elements of the output matrix" (EPILOGUE_AUX_DATA_TYPE left unset);
 * - the aux leading dimension is our n (the library's D is our Dᵀ, n rows): EPILOGUE_AUX_LD "must be
 *   divisible by 8 and be no less than the number of rows in the output matrix" (cublasLt.h).
 *
 * Numerics: the call multiplies its f32 accumulator by GELU'(P) and rounds once to D's type; the graph
 * rounds the product to its f16/bf16 dtype first (one rounding more, as the scratch path reads it), and
 * reads the same stored P. A heuristic miss runs the plan kernel's template GEMM, which computes the
 * whole kernel itself.
 */
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import type { FusedKernel } from "../fusion/types.ts";
import { tanhGeluGradient } from "./gemm_gelu.ts";
import type { GemmAux, GemmDType, GemmOperand } from "./gemm_library.ts";
import { storedTypeOf, type ValueContext } from "./values.ts";

/** D's and the aux operand of a DGELU call, or why the kernel is none. */
export type DgeluVerdict =
  | { readonly ok: true; readonly d: GemmOperand; readonly aux: GemmAux }
  | { readonly ok: false; readonly reason: string };

const LT_TYPES: readonly string[] = ["f32", "f16", "bf16"];

/**
 * The DGELU call's D and aux for matmul kernel `k` (whose call is m×n, `batch` entries, operands stored
 * `operands`), or why not (see the file comment).
 */
export function dgeluCall(
  g: Graph,
  k: FusedKernel,
  ctx: ValueContext,
  call: { readonly m: number; readonly n: number; readonly batch: number; readonly outer?: number },
  operands: GemmDType,
): DgeluVerdict {
  const no = (reason: string): DgeluVerdict => ({ ok: false, reason });
  if (k.anchor === undefined || k.roots.length !== 1) return no("not one root");
  const [root] = k.roots;
  const shape = g.nodes[root].type.shape;
  if (numel(shape) !== call.m * call.n) return no("the root differs in size from the product");
  // P: a value the kernel loads, of the root's shape.
  const loaded = new Set<NodeId>();
  for (const id of k.members) {
    for (const i of g.nodes[id].inputs) if (!ctx.members.has(i) && !ctx.computedAnywhere(i)) loaded.add(i);
  }
  for (const pre of loaded) {
    if (g.nodes[pre].type.shape.join() !== shape.join()) continue;
    const d = tanhGeluGradient(g, root, pre);
    if (d === undefined) continue;
    // D: the product itself, through reshapes and casts to f32 computed here.
    let cur = d;
    while (cur !== k.anchor) {
      const n = g.nodes[cur];
      const through = n.op === "reshape" || (n.op === "cast" && n.attrs.to === "f32");
      if (!ctx.members.has(cur) || !through) return no(`the GELU gradient multiplies %${d}, not the product`);
      cur = n.inputs[0];
    }
    if (call.batch !== 1 || (call.outer ?? 1) > 1) {
      return no("a batched call (the aux needs no batch stride)");
    }
    const dType = storedTypeOf(ctx, root), auxType = storedTypeOf(ctx, pre);
    if (!LT_TYPES.includes(dType)) return no(`D stored ${dType}`);
    if (auxType !== dType) {
      return no(`the pre-activation is stored ${auxType}, D ${dType} (cuBLASLt: the same)`);
    }
    if (dType !== "f32" && dType !== operands) return no(`D stored ${dType} from ${operands} operands`);
    if (call.n % 8 !== 0) return no(`n ${call.n} is no multiple of 8 (EPILOGUE_AUX_LD)`);
    return { ok: true, ...outputAndAux(ctx, root, pre, call, dType as GemmDType) };
  }
  return no("the root is no tanh-form GELU gradient of a loaded value");
}

/**
 * A GELU epilogue's D (`out`, row-major m×n, batched by m·n) and its aux (`pre`, the pre-activation, laid
 * out as D: cuBLASLt's aux is in D's type with a leading dimension of its own, here n).
 */
export function outputAndAux(
  ctx: ValueContext,
  out: NodeId,
  pre: NodeId,
  call: { readonly m: number; readonly n: number },
  dtype: GemmDType,
): { readonly d: GemmOperand; readonly aux: GemmAux } {
  return {
    d: {
      buffer: ctx.bufferOf(out),
      offset: 0,
      dtype,
      ld: call.n,
      trans: false,
      batchStride: call.m * call.n,
    },
    aux: { buffer: ctx.bufferOf(pre), offset: 0, dtype, ld: call.n },
  };
}
