/**
 * The weight-copies stage: GEMM weights read from low-precision copies for library GEMMs, kept between
 * steps and rewritten by the optimizer where the step updates a flat parameter vector, else rounded once
 * per step by a kernel of their own (weight_copies.ts).
 */
import type { Stage } from "../pipeline/stage_runner.ts";
import { LOW_DTYPE } from "../training_graph/mixed_precision.ts";
import { keptCopies } from "../passes/low_weight_copies.ts";
import type { KernelState } from "./state.ts";
import { compilePrecision } from "./storage.ts";

export const weightCopiesStage: Stage<KernelState> = {
  name: "weight-copies",
  about:
    "CUDA: f32 weights a GEMM rounds on load are read from an f16/bf16 copy the optimizer rewrites each step (else one rounded per step)",
  run: (s, ctx) => {
    // Only cuBLASLt needs the copy: the template (WGSL, C) rounds on load for free, and the unfused
    // baseline keeps one kernel per op.
    if (!s.options.fuse || s.options.target.implements.gemm !== "cublaslt") return s;
    const r = keptCopies(s.graph, LOW_DTYPE[compilePrecision(s)]);
    if (r.kept === 0 && r.castRoots.size === 0) return s;
    if (ctx.flags.level >= 3) {
      console.error(
        `weight-copies: ${r.kept} weight copies kept by the optimizer, ${r.castRoots.size} weight casts materialized`,
      );
    }
    return { ...s, graph: r.graph, forcedRoots: r.castRoots };
  },
  skip: (s) => s,
};
