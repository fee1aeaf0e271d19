/**
 * Lowering: each fused kernel to the kernel IR (index math, loops, reductions, workgroup shape), flash kernels
 * to their CUDA C, and each library call with its buffers and epilogue kernel; then loop kernels (epilogues
 * included) whose bindings allow it process four consecutive elements per thread.
 */
import { lowerKernel } from "../lower/lower_kernel.ts";
import { vectorizeLoop } from "../lower/vectorize.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import { flashKernel } from "./flash_attention.ts";
import { libraryGemmOf } from "./library_calls.ts";
import { type FlashOverride, type KernelState, type LibraryGemm, need, valueContext } from "./state.ts";

export const lowerStage: Stage<KernelState> = {
  name: "lower",
  about: "each fused kernel becomes a kernel-IR kernel: index math, loop or row structure, workgroup shape",
  run: (s) => {
    const ctx = valueContext(s, "lower");
    const fusion = need(s.fusion, "the fusion", "lower");
    // The flash-attention stage's kernels: their bindings and the CUDA C they are written in.
    const flash = new Map<number, FlashOverride>();
    const kernels = fusion.kernels.map((k, i) => {
      const part = k.kind === "attention" ? s.flashParts?.get(k.roots[0]) : undefined;
      if (!part) return lowerKernel(s.graph, k, { ...ctx, members: k.members }, s.options.target);
      const lse = s.flashLse?.get(part.site.o);
      if (lse === undefined) {
        throw new Error(`internal: flash site %${part.site.o} has no log-sum-exp buffer`);
      }
      const f = flashKernel(k, part, s.buffers!, s.bufferOfNode!, lse);
      flash.set(i, f.override);
      return f.kernel;
    });
    const gemmOf = new Map<number, LibraryGemm>();
    for (const [i, v] of s.calls ?? []) {
      const k = fusion.kernels[i];
      gemmOf.set(i, libraryGemmOf(s.graph, k, v, { ...ctx, members: k.members }, s.scratchOf?.get(i)));
    }
    return { ...s, kernels, ...(flash.size ? { flash } : {}), ...(s.calls ? { gemmOf } : {}) };
  },
};

const vectorizeEpilogue = (
  l: LibraryGemm,
) => (l.epilogue ? { ...l, epilogue: vectorizeLoop(l.epilogue) } : l);

export const vectorizeStage: Stage<KernelState> = {
  name: "vectorize",
  about: "loop kernels that qualify take four consecutive elements per thread (vec4 loads and stores)",
  run: (s) => ({
    ...s,
    kernels: need(s.kernels, "lowered kernels", "vectorize").map(vectorizeLoop),
    gemmOf: s.gemmOf && new Map([...s.gemmOf].map(([i, l]) => [i, vectorizeEpilogue(l)])),
  }),
  skip: (s) => s,
};
