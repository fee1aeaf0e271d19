/** The weight-copies stage: GEMM weights rounded once per step for library GEMMs (weight_copies.ts). */
import type { Stage } from "../pipeline.ts";
import { LOW_DTYPE } from "../passes/precision.ts";
import { lowWeightCopies } from "../weight_copies.ts";
import type { KernelState } from "./state.ts";
import { compilePrecision } from "./storage.ts";

export const weightCopiesStage: Stage<KernelState> = {
  name: "weight-copies",
  about: "CUDA: f32 weights a GEMM rounds on load are rounded once per step into an f16/bf16 copy it reads",
  run: (s, ctx) => {
    // Only cuBLASLt needs the copy: the template (WGSL, C) rounds on load for free, and the unfused
    // baseline keeps one kernel per op.
    if (!s.options.fuse || !s.options.emitters.cuda || s.options.libraryGemms === false) return s;
    const roots = lowWeightCopies(s.graph, LOW_DTYPE[compilePrecision(s)]);
    if (roots.size === 0) return s;
    if (ctx.flags.level >= 3) console.error(`weight-copies: ${roots.size} weight casts materialized`);
    return { ...s, forcedRoots: roots };
  },
  skip: (s) => s,
};
