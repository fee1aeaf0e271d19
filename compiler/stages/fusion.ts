/**
 * The fusion stages: producer-consumer fusion (consumers first), then the kernel-level fusions in the
 * order they must run — attention while its softmax kernel is still alone, sibling fusion, consumer
 * merging, then reductions reading only what one kernel wrote. Each spends the one FUSION_FUEL budget
 * and logs its decisions at DEBUG=3.
 */
import { fuseAttention } from "../fusion/attention.ts";
import { MAX_MERGED_BINDINGS, mergeConsumers } from "../fusion/consumers.ts";
import { fuseProducers } from "../fusion/fuse.ts";
import { mergeSmallReductions } from "../fusion/horizontal.ts";
import { layoutForGemms } from "../fusion/permuted_storage.ts";
import { mergeRowBlocks } from "../fusion/row_blocks.ts";
import { MAX_SIBLING_BINDINGS, mergeSameWriter, mergeSiblings } from "../fusion/siblings.ts";
import type { FusionResult } from "../fusion/types.ts";
import type { PassContext, Stage } from "../pipeline/stage_runner.ts";
import { type KernelState, need } from "./state.ts";

const takeFuel = (ctx: PassContext) => () => ctx.fuel.take();

/**
 * The most buffers a sibling or consumer merge may make a kernel bind. Where the target binds them through a
 * table of limited size (WGSL), the pass's portability cap, or the adapter's limit if lower. CUDA and C kernels
 * take their buffers as parameters and have no such limit: there a merge is bounded only by an adapter limit
 * passed in (none today), so bert-large's LAMB update also computes the weight norm over the weights it
 * already reads (1.3 GB less per step) instead of stopping at 12 buffers.
 */
function mergeBindingLimit(s: KernelState, cap: number): number {
  if (s.options.target.limitedBindings) return Math.min(s.options.maxBindings ?? cap, cap);
  return s.options.maxBindings ?? Infinity;
}
const logOf = (ctx: PassContext) => ctx.flags.level >= 3 ? (m: string) => console.error(m) : undefined;

export const fusionStage: Stage<KernelState> = {
  name: "fusion",
  about:
    "producer-consumer fusion, consumers first: each node joins the one kernel reading it, or roots its own",
  run: (s, ctx) => {
    const claims = s.flashClaims;
    const fusion = fuseProducers(s.graph, {
      fuse: s.fusing,
      takeFuel: takeFuel(ctx),
      log: logOf(ctx),
      maxBindings: s.options.maxBindings,
      maxBindingBytes: s.options.maxBindingBytes,
      roots: claims ? new Set([...s.forcedRoots ?? [], ...claims.stored]) : s.forcedRoots,
      calls: s.graphCalls,
      seeded: claims?.kernels,
    });
    if (!claims) return { ...s, fusion };
    const flashParts = new Map(claims.kernels.map((k) => [Math.min(...k.roots), k.part]));
    return { ...s, fusion, flashParts };
  },
  // The unfused baseline: one kernel per op; the later fusion stages then do nothing either.
  skip: (s, ctx) => ({
    ...s,
    fusing: false,
    fusion: fuseProducers(s.graph, { fuse: false, takeFuel: takeFuel(ctx), log: logOf(ctx) }),
  }),
};

/** A kernel-level fusion stage, which does nothing when not fusing or when skipped. */
function kernelFusion(
  name: string,
  about: string,
  fuse: (s: KernelState, f: FusionResult, ctx: PassContext) => FusionResult,
): Stage<KernelState> {
  return {
    name,
    about,
    run: (s, ctx) => {
      if (!s.fusing) return s;
      const f = need(s.fusion, "the fusion", name);
      const next = fuse(s, f, ctx);
      return next === f ? s : { ...s, fusion: next };
    },
    skip: (s) => s,
  };
}

export const attentionStage = kernelFusion(
  "fusion-attention",
  "QKᵀ, softmax and PV become one attention kernel where nothing else reads the probabilities",
  // Not where the profile's GEMMs are a library's and our attention kernel is not (cuda-sm90: no tensor-core
  // attention kernel yet; cpu: BLAS), so QKᵀ and PV stay library calls (targets/profiles.ts).
  (s, f, ctx) =>
    !s.options.target.fuseAttention ? f : fuseAttention(s.graph, f, {
      takeFuel: takeFuel(ctx),
      log: logOf(ctx),
      always: s.options.target.fuseAttention === "always",
    }),
);

export const siblingStage = kernelFusion(
  "fusion-siblings",
  "kernels over one space that read a common tensor merge into one multi-output kernel",
  (s, f, ctx) =>
    mergeSiblings(
      s.graph,
      f,
      takeFuel(ctx),
      mergeBindingLimit(s, MAX_SIBLING_BINDINGS),
      s.options.maxBindingBytes,
    ),
);

// Then values that GEMMs read only through a permuting view (attention's heads and results) are stored
// in that view's layout, so that library GEMMs can read and write them (fusion/permuted_storage.ts).
export const consumerStage = kernelFusion(
  "fusion-consumers",
  "an elementwise kernel reading a producer's output at the same elements folds into that producer; " +
    "attention's heads and results are stored in the layout their GEMMs read",
  (s, f, ctx) =>
    layoutForGemms(
      s.graph,
      mergeConsumers(
        s.graph,
        f,
        takeFuel(ctx),
        mergeBindingLimit(s, MAX_MERGED_BINDINGS),
        s.options.maxBindingBytes,
      ),
      {
        takeFuel: takeFuel(ctx),
        log: logOf(ctx),
      },
    ),
);

// After consumer merging, which puts a LayerNorm backward's dγ first pass into the kernel computing dY and
// its dβ first pass: the two second passes then read only what that one kernel wrote.
export const sameWriterStage = kernelFusion(
  "fusion-same-writer",
  "reductions over one space and axes that read only what one kernel wrote merge",
  (s, f, ctx) =>
    mergeSameWriter(
      s.graph,
      f,
      takeFuel(ctx),
      mergeBindingLimit(s, MAX_SIBLING_BINDINGS),
      s.options.maxBindingBytes,
      s.graphCalls?.bgradSums,
    ),
);

// Last: a column sum's first pass joins the row kernel that reads what it computes (a LayerNorm backward
// in one kernel), on profiles that give a row a workgroup (fusion/row_blocks.ts).
export const rowBlockStage = kernelFusion(
  "fusion-row-blocks",
  "a column sum's first pass joins the row kernel reading its values: a workgroup walks a part's rows",
  (s, f, ctx) => {
    return mergeRowBlocks(
      s.graph,
      f,
      s.options.target,
      takeFuel(ctx),
      mergeBindingLimit(s, MAX_SIBLING_BINDINGS),
      s.options.maxBindingBytes,
    );
  },
);

// After every other merge, so that only kernels nothing else took are joined side by side.
export const smallReductionsStage = kernelFusion(
  "fusion-small-reductions",
  "small reductions over one space that share nothing merge into one kernel, saving launches",
  (s, f, ctx) =>
    mergeSmallReductions(
      s.graph,
      f,
      s.options.target.smallReductionBytes,
      takeFuel(ctx),
      mergeBindingLimit(s, MAX_SIBLING_BINDINGS),
      s.options.maxBindingBytes,
      s.graphCalls?.bgradSums,
    ),
);
