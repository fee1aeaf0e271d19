/**
 * Q, K, V and dO read token-major by the flash-attention kernels (the flash stage, flash_attention.ts): once
 * flash kernels compute an attention, nothing else reads the heads-major copies fusion chose to store, so
 * each projection's fused kernel is re-rooted at the matmul and becomes a plain cuBLASLt call writing the
 * token-major f16 product, with no scratch and no epilogue kernel; the flash kernels add the bias on load.
 * Done only where the result is a direct library call (DESIGN.md, notes: compiler/stages/flash_operands.ts).
 */
import type { NodeId } from "../../ir/mod.ts";
import type { FusedKernel, FusionResult } from "../fusion/types.ts";
import { deriveGemm } from "../lower/gemm_library.ts";
import type { ProductHeads } from "../lower/flash_match.ts";
import { type KernelState, valueContext } from "./state.ts";

/** The fusion the flash stage edits, as working copies: kernels, kernelOf and the materialized set. */
export interface FusionWork {
  readonly fused: FusedKernel[];
  readonly kernelOf: Int32Array;
  readonly materialized: Set<NodeId>;
}

export const fusionWork = (f: FusionResult): FusionWork => ({
  fused: [...f.kernels],
  kernelOf: new Int32Array(f.kernelOf),
  materialized: new Set(f.materialized),
});

/** The fusion result the work describes. */
export const workedFusion = (f: FusionResult, w: FusionWork): FusionResult => ({
  ...f,
  kernels: w.fused,
  kernelOf: w.kernelOf,
  materialized: w.materialized,
});

/**
 * Re-roots fused kernel `at` (whose one root is `root`, a heads-major value `heads` describes) at its matmul,
 * or says why not (then `w` is unchanged).
 */
export function rerootAtProduct(
  s: KernelState,
  w: FusionWork,
  at: number,
  root: NodeId,
  heads: ProductHeads,
  users: readonly (readonly NodeId[])[],
): string | undefined {
  const old = w.fused[at];
  if (old.kind !== "matmul" || old.anchor === undefined || old.roots.join() !== String(root)) {
    return `%${root} is not the one root of a matmul kernel`;
  }
  if (!s.graphCalls?.raw.has(old.anchor)) return `the matmul of fused kernel ${at} is not a library call`;
  const anchor = old.anchor;
  const dropped = new Set(heads.chain.filter((x) => old.members.has(x)));
  const members = new Set([...old.members].filter((x) => !dropped.has(x)));
  // What stays computes the product: every other member is read inside the kernel only.
  for (const x of members) {
    if (x !== anchor && !users[x].every((u) => members.has(u))) {
      return `%${x} of fused kernel ${at} is read outside the product`;
    }
  }
  const kernel: FusedKernel = { ...old, roots: [anchor], members };
  // The verdict the library-calls stage will reach (nodes standing for their buffers, as there): the dropped
  // members computed where read.
  const base = valueContext({ ...s, fusion: workedFusion(s.fusion!, w) }, "flash-attention", "nodes");
  const ctx = {
    ...base,
    computedAnywhere: (id: NodeId) => dropped.has(id) || base.computedAnywhere(id),
    members,
  };
  const v = deriveGemm(s.graph, kernel, ctx, { biasEpilogue: true });
  if (!v.ok || !v.direct || v.direct.root !== anchor) {
    return `fused kernel ${at}'s product would not be a direct library call`;
  }
  w.fused[at] = kernel;
  for (const x of dropped) w.kernelOf[x] = -1;
  w.materialized.delete(root);
  w.materialized.add(anchor);
  return undefined;
}
