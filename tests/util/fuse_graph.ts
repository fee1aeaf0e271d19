/** Every fusion stage in order, as the compiler's fusion stages run them, for tests that want no plan. */
import type { Graph } from "../../ir/mod.ts";
import { fuseAttention } from "../../compiler/fusion/attention.ts";
import { mergeConsumers } from "../../compiler/fusion/consumers.ts";
import { fuseProducers, type FusionOptions } from "../../compiler/fusion/fuse.ts";
import { mergeSameWriter, mergeSiblings } from "../../compiler/fusion/siblings.ts";
import type { FusionResult } from "../../compiler/fusion/types.ts";

/** `attention`: false leaves attention as three kernels (QKᵀ, softmax, PV); "always" skips its shape rule. */
export function fuseGraph(g: Graph, opts: FusionOptions & { attention?: boolean | "always" }): FusionResult {
  const result = fuseProducers(g, opts);
  if (!opts.fuse) return result;
  // Attention first, while its softmax kernel is still alone (a sibling merge would give it more roots).
  const withAttention = opts.attention === false
    ? result
    : fuseAttention(g, result, { ...opts, always: opts.attention === "always" });
  const merged = mergeConsumers(g, mergeSiblings(g, withAttention, opts.takeFuel), opts.takeFuel);
  return mergeSameWriter(g, merged, opts.takeFuel);
}
