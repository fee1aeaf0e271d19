/** Lowering: each fused kernel to the kernel IR (index math, loops, reductions, workgroup shape). */
import { lowerKernel } from "../lower/lower_kernel.ts";
import type { Stage } from "../pipeline.ts";
import { type KernelState, need, valueContext } from "./state.ts";

export const lowerStage: Stage<KernelState> = {
  name: "lower",
  about: "each fused kernel becomes a kernel-IR kernel: index math, loop or row structure, workgroup shape",
  run: (s) => {
    const ctx = valueContext(s, "lower");
    const fusion = need(s.fusion, "the fusion", "lower");
    return {
      ...s,
      kernels: fusion.kernels.map((k) =>
        lowerKernel(s.graph, k, { ...ctx, members: k.members }, s.options.target)
      ),
    };
  },
};
