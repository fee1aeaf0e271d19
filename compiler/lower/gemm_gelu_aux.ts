/**
 * The tanh-form GELU forward as cuBLASLt's GELU_AUX_BIAS epilogue (issue 16 item 1). Where the backward
 * reads the pre-activation P = product + bias (compiler/fusion/gelu_aux.ts stores it for DGELU), the FFN-up
 * GEMM kernel writes two roots, P and GELU(P): as a library call that is a scratch product and an epilogue
 * kernel reading it back. CUBLASLT_EPILOGUE_GELU_AUX_BIAS ("apply Bias and then GELU transform; outputs
 * GELU input as a separate matrix", cublasLt.h) computes both in the call: aux = acc + bias (the GELU
 * input matrix at EPILOGUE_AUX_POINTER) and D = GELU(acc + bias), GELU the tanh form
 * (compiler/lower/gemm_gelu.ts), each rounded once to D's type.
 *
 * Taken where, exactly:
 * - the kernel's two roots are P and A with A exactly the tanh-form GELU of P (gemm_gelu.ts isTanhGelu);
 * - P is, through reshapes, the product (through reshapes and casts to f32) plus a linear layer's bias: a
 *   packed vector over the product's columns stored in a type cuBLASLt pairs with D's (gemm_library.ts
 *   biasVectorOf, LT_BIAS_TYPES: cublasLt.h documents the bias in D's type, so BERT's f32 biases on f16
 *   products wait for a GPU check, as for the BIAS epilogue);
 * - A and P are stored in D's type (EPILOGUE_AUX_DATA_TYPE unset: "GELU input matrix elements type is the
 *   same as the type of elements of the output matrix"), n is a multiple of 8 (EPILOGUE_AUX_LD), one batch
 *   entry.
 *
 * Numerics: the graph rounds an f16/bf16 product before adding the f32 bias; the call adds the bias to its
 * f32 accumulator (as the BIAS epilogue and the template kernel do). A heuristic miss runs the kernel's
 * template GEMM.
 */
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import type { FusedKernel } from "../fusion/types.ts";
import { outputAndAux } from "./gemm_dgelu.ts";
import { isTanhGelu } from "./gemm_gelu.ts";
import {
  biasVectorOf,
  type GemmAux,
  type GemmBias,
  type GemmDType,
  type GemmOperand,
} from "./gemm_library.ts";
import { storedTypeOf, type ValueContext } from "./values.ts";

export type GeluAuxVerdict =
  | { readonly ok: true; readonly d: GemmOperand; readonly aux: GemmAux; readonly bias: GemmBias }
  | { readonly ok: false; readonly reason: string };

/** D (the activation), the aux (P) and the bias of a GELU_AUX_BIAS call for matmul kernel `k`, or why not. */
export function geluAuxBiasCall(
  g: Graph,
  k: FusedKernel,
  ctx: ValueContext,
  call: { readonly m: number; readonly n: number; readonly batch: number; readonly outer?: number },
): GeluAuxVerdict {
  const no = (reason: string): GeluAuxVerdict => ({ ok: false, reason });
  if (k.anchor === undefined || k.roots.length !== 2) return no("not two roots");
  const [r0, r1] = k.roots;
  const [act, pre] = isTanhGelu(g, r0, r1) ? [r0, r1] : isTanhGelu(g, r1, r0) ? [r1, r0] : [];
  if (act === undefined || pre === undefined) return no("no root is the tanh-form GELU of the other");
  // P: reshapes of product + bias, the add in the product's coordinates.
  let add = pre;
  while (g.nodes[add].op === "reshape" && ctx.members.has(add)) add = g.nodes[add].inputs[0];
  const a = g.nodes[add];
  if (a.op !== "add" || !ctx.members.has(add)) return no("the pre-activation is no add");
  const fromProduct = (id: NodeId): boolean => {
    let cur = id;
    while (cur !== k.anchor) {
      const n = g.nodes[cur];
      if (!ctx.members.has(cur) || !(n.op === "reshape" || (n.op === "cast" && n.attrs.to === "f32"))) {
        return false;
      }
      cur = n.inputs[0];
    }
    return true;
  };
  const side = a.inputs.findIndex(fromProduct);
  if (side < 0) return no("the add does not read the product");
  const mm = g.nodes[k.anchor];
  if (numel(a.type.shape) !== call.m * call.n || a.type.shape.join() !== mm.type.shape.join()) {
    return no("the add is not in the product's coordinates");
  }
  if (call.batch !== 1 || (call.outer ?? 1) > 1) return no("a batched call");
  if (call.n % 8 !== 0) return no(`n ${call.n} is no multiple of 8 (EPILOGUE_AUX_LD)`);
  const dType = storedTypeOf(ctx, act), auxType = storedTypeOf(ctx, pre);
  if (!["f32", "f16", "bf16"].includes(dType) || auxType !== dType) {
    return no(`the activation is stored ${dType}, the pre-activation ${auxType} (cuBLASLt: both D's type)`);
  }
  const dtype = dType as GemmDType;
  const bias = biasVectorOf(g, ctx, a.inputs[1 - side], mm.type.shape, dtype);
  if (!bias) return no(`the other addend is no bias vector cuBLASLt pairs with a ${dtype} D`);
  return { ok: true, ...outputAndAux(ctx, act, pre, call, dtype), bias };
}
