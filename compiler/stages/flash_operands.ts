/**
 * Q, K, V and dO read token-major by the flash-attention kernels (the flash stage, flash_attention.ts): once
 * flash kernels replace the attention GEMMs, nothing else reads the heads-major copies fusion stored, so
 * each projection's fused kernel is re-rooted at the matmul and becomes a plain cuBLASLt call writing the
 * token-major f16 product, with no scratch and no epilogue kernel; the flash kernels add the bias on load.
 * Done only where the result is a direct library call (DESIGN.md, notes: compiler/stages/flash_operands.ts).
 */
import type { NodeId } from "../../ir/mod.ts";
import type { FusedKernel, FusionResult } from "../fusion/types.ts";
import type { Kernel } from "../kernel_ir/ir.ts";
import { deriveGemm } from "../lower/gemm_library.ts";
import type { ProductHeads } from "../lower/flash_match.ts";
import { lowerKernel } from "../lower/lower_kernel.ts";
import { vectorizeLoop } from "../lower/vectorize.ts";
import { nodeBuffer } from "./buffers.ts";
import { directGemm } from "./library_calls.ts";
import { launchAccess } from "./schedule.ts";
import {
  type GemmDecision,
  type KernelState,
  type LibraryGemm,
  type StateBuffer,
  valueContext,
} from "./state.ts";

/** The parts of the state re-rooting changes, as working copies (made once) the flash stage mutates. */
export interface RerootWork {
  /** Fusion's kernels, kernelOf and materialized set. */
  readonly fused: FusedKernel[];
  readonly kernelOf: Int32Array;
  readonly materialized: Set<NodeId>;
  readonly buffers: StateBuffer[];
  readonly bufferOfNode: Map<NodeId, number>;
  readonly kernels: Kernel[];
  readonly gemmOf: Map<number, LibraryGemm>;
  readonly gemms: GemmDecision[];
  /** What the launch of a re-rooted kernel reads and writes now, by kernel index. */
  readonly access: Map<number, { reads: number[]; writes: number[] }>;
}

export function rerootWork(s: KernelState): RerootWork {
  const f = s.fusion!;
  return {
    fused: [...f.kernels],
    kernelOf: new Int32Array(f.kernelOf),
    materialized: new Set(f.materialized),
    buffers: [...s.buffers!],
    bufferOfNode: new Map(s.bufferOfNode!),
    kernels: [...s.kernels!],
    gemmOf: new Map(s.gemmOf ?? []),
    gemms: [...(s.gemms ?? [])],
    access: new Map(),
  };
}

/** The fusion result the work describes. */
export const rerootedFusion = (s: KernelState, w: RerootWork): FusionResult => ({
  ...s.fusion!,
  kernels: w.fused,
  kernelOf: w.kernelOf,
  materialized: w.materialized,
});

/**
 * Re-roots kernel `at` (whose one root is `root`, a heads-major value `heads` describes) at its matmul, or
 * says why not (then `w` is unchanged).
 */
export function rerootAtProduct(
  s: KernelState,
  w: RerootWork,
  at: number,
  root: NodeId,
  heads: ProductHeads,
  users: readonly (readonly NodeId[])[],
): string | undefined {
  const old = w.fused[at];
  if (old.kind !== "matmul" || old.anchor === undefined || old.roots.join() !== String(root)) {
    return `%${root} is not the one root of a matmul kernel`;
  }
  const anchor = old.anchor;
  const dropped = new Set(heads.chain.filter((x) => old.members.has(x)));
  const members = new Set([...old.members].filter((x) => !dropped.has(x)));
  // What stays computes the product: every other member is read inside the kernel only.
  for (const x of members) {
    if (x !== anchor && !users[x].every((u) => members.has(u))) {
      return `%${x} of ${w.kernels[at].name} is read outside the product`;
    }
  }
  const kernel: FusedKernel = { ...old, roots: [anchor], members };
  const buffer = nodeBuffer(s, w.buffers, anchor, "activation");
  // The lowering's view of the state as it would be: the dropped members computed where read (no
  // kernel computes them, no buffer holds them), the product in the new buffer.
  const base = valueContext(
    { ...s, fusion: rerootedFusion(s, w), bufferOfNode: w.bufferOfNode },
    "flash-attention",
  );
  const ctx = {
    ...base,
    computedAnywhere: (id: NodeId) => dropped.has(id) || base.computedAnywhere(id),
    bufferOf: (id: NodeId) => (id === anchor ? buffer.id : base.bufferOf(id)),
    members,
  };
  const v = deriveGemm(s.graph, kernel, ctx, { biasEpilogue: true });
  if (!v.ok || !v.direct || v.direct.root !== anchor) {
    return `${w.kernels[at].name}'s product would not be a direct library call`;
  }
  const lowered = lowerKernel(s.graph, kernel, ctx, s.options.target);
  const k = s.vectorized ? vectorizeLoop(lowered) : lowered;
  const d = directGemm(v, v.direct, k.name);
  const i = w.gemms.findIndex((x) => x.kernel === w.kernels[at].name);
  if (i >= 0) w.gemms[i] = d.decision;
  w.fused[at] = kernel;
  for (const x of dropped) w.kernelOf[x] = -1;
  w.materialized.delete(root);
  w.materialized.add(anchor);
  w.buffers.push(buffer);
  w.bufferOfNode.set(anchor, buffer.id);
  w.kernels[at] = k;
  w.gemmOf.set(at, d.gemm);
  w.access.set(at, launchAccess(k.bindings));
  return undefined;
}
