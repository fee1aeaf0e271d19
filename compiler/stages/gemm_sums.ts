/**
 * Sums of GEMM products as cuBLASLt's C with beta 1 (CUDA plans with library GEMMs): the gemm-calls stage
 * sums an add tree's products first (compiler/passes/gemm_sum_order.ts); after the other fusion stages, this
 * one moves each partial sum into the kernel of the call that can add it as C (fusion/sums_into_gemms.ts).
 * Which kernel computes the add is a fusion decision (buffers, storage dtypes and the template fallback follow
 * from it), which library-calls only reads back.
 */
import { sumsIntoGemms } from "../fusion/sums_into_gemms.ts";
import type { PassContext, Stage } from "../pipeline/stage_runner.ts";
import { type KernelState, need } from "./state.ts";

const logOf = (ctx: PassContext) => ctx.flags.level >= 3 ? (m: string) => console.error(m) : undefined;

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
