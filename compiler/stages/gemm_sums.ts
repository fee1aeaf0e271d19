/**
 * Sums of GEMM products as cuBLASLt's C with beta 1, on CUDA plans with library GEMMs (the only runtime
 * that runs the calls; targets/target.ts Implementations), in two stages: before fusion the products of an
 * add tree are summed first (compiler/passes/gemm_sum_order.ts), after the other fusion stages each partial
 * sum moves into the kernel of the GEMM that can add it as C (compiler/fusion/sums_into_gemms.ts). A stage
 * file of its own rather than the library-calls stage: which kernel computes the add is a fusion decision
 * (buffers, storage dtypes and the template fallback follow from it), which library-calls only reads back.
 */
import { sumsIntoGemms } from "../fusion/sums_into_gemms.ts";
import { productsSummedFirst } from "../passes/gemm_sum_order.ts";
import type { PassContext, Stage } from "../pipeline/stage_runner.ts";
import { type KernelState, need } from "./state.ts";

const applies = (s: KernelState) => s.options.target.implements.gemm === "cublaslt";
const logOf = (ctx: PassContext) => ctx.flags.level >= 3 ? (m: string) => console.error(m) : undefined;

export const gemmSumOrderStage: Stage<KernelState> = {
  name: "gemm-sum-order",
  about: "CUDA: in a sum with two or more GEMM products, the products are summed first",
  run: (s, ctx) => {
    if (!s.options.fuse || !applies(s)) return s;
    const r = productsSummedFirst(s.graph);
    if (r.trees === 0) return s;
    logOf(ctx)?.(`gemm-sum-order: ${r.trees} sums with their GEMM products first`);
    return { ...s, graph: r.graph };
  },
  skip: (s) => s,
};

const NAME = "fusion-gemm-sums";

export const gemmSumsStage: Stage<KernelState> = {
  name: NAME,
  about: "CUDA: an add of a library GEMM's product and a stored tensor becomes the call's C (beta 1)",
  run: (s, ctx) => {
    const raw = s.graphCalls?.raw;
    if (!s.fusing || !raw?.size) return s;
    const f = need(s.fusion, "the fusion", NAME);
    const next = sumsIntoGemms(s.graph, f, raw, () => ctx.fuel.take(), logOf(ctx));
    return next === f ? s : { ...s, fusion: next };
  },
  skip: (s) => s,
};
