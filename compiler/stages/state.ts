/**
 * The state the kernel-level stages thread through the compile: each stage returns a copy with the part
 * it makes filled in (and never mutates the state it was given, which the pipeline keeps for dumps and
 * error reports). A field is present once the stage that makes it has run.
 */
import type { DType, Graph, NodeId } from "../../ir/mod.ts";
import type { Target } from "../targets/target.ts";
import type { Plan, PlanBuffer, PlanStep, TargetKernel } from "../../plan/plan.ts";
import type { FusionResult } from "../fusion/types.ts";
import type { Kernel } from "../kernel_ir/ir.ts";
import type { PlanGemm } from "../../plan/plan.ts";
import type { ValueContext } from "../lower/values.ts";
import type { Precision } from "../training_graph/mixed_precision.ts";
import type { StoragePlan } from "../storage/storage_precision.ts";
import type { FlashSite } from "../passes/flash_match.ts";
import type { GemmVerdict } from "../lower/gemm_library.ts";
import type { BgradEpilogue } from "../lower/gemm_bgrad.ts";
import type { GraphCalls } from "../passes/gemm_calls.ts";

/** Whether a matmul kernel's GEMM became a library call on CUDA, and why (not). */
export interface GemmDecision {
  readonly kernel: string;
  readonly library: boolean;
  readonly reason: string;
}

/** What the caller asked for: the options every stage may read. */
export interface KernelOptions {
  /** false: one kernel per op (the unfused baseline). */
  readonly fuse: boolean;
  /** What the plan is for: lowering's knobs, the language and its emitter, the library calls. */
  readonly target: Target;
  /** The storage precision; absent: the precision the graph was prepared for (Graph.precision). */
  readonly precision?: Precision;
  /**
   * false: a plan for its figures only (the report's unfused baseline), lowered but not rendered: every
   * source is empty, and no runtime can run it. Default true.
   */
  readonly render?: boolean;
  /**
   * The most buffers one kernel may bind: the device's storage buffers per shader stage (a WebGPU
   * adapter's maxStorageBuffersPerShaderStage: WebGPU guarantees 8, Chrome's SwiftShader adapter offers
   * 10, lavapipe 32). Fusion refuses a merge past it. Unlimited when undefined.
   */
  readonly maxBindings?: number;
  /**
   * The most bytes one binding may see (WebGPU's maxStorageBufferBindingSize, the adapter's own): a
   * larger buffer is bound as several ranges (plan/binding_ranges.ts), each counted against maxBindings.
   * Unlimited when undefined.
   */
  readonly maxBindingBytes?: number;
}

/** A plan buffer before memory planning gives it a slot. */
export type StateBuffer = Omit<PlanBuffer, "slot">;

/**
 * A matmul kernel's library call as the library-calls stage decides it, before buffers exist: its operands'
 * `buffer` fields (and a bias gradient's vector and copies) hold the nodes whose buffers they are (the lower
 * stage puts the buffers in).
 */
export type GemmCall = Extract<GemmVerdict, { readonly ok: true }> & { readonly bgrad?: BgradEpilogue };

/** A GEMM that runs as a library call, with the epilogue kernel that reads its f32 scratch product. */
export interface LibraryGemm {
  readonly call: PlanGemm;
  readonly epilogue?: Kernel;
  readonly scratch?: number;
}

/** The step program and the plan's named entry points. */
export interface Schedule {
  readonly steps: readonly PlanStep[];
  readonly inputs: Readonly<Record<string, number>>;
  readonly params: Readonly<Record<string, number>>;
  readonly outputs: Readonly<Record<string, number>>;
  readonly updates: readonly { readonly param: number; readonly value: number }[];
  /** The buffers each step reads and writes (a library GEMM's step also its scratch). */
  readonly access: readonly { readonly reads: readonly number[]; readonly writes: readonly number[] }[];
}

/** Where each buffer lives: its slot and byte offset (the parts of an in-place flat vector sit inside it). */
export interface MemoryLayout {
  readonly slotOf: ReadonlyMap<number, number>;
  readonly offsetOf: ReadonlyMap<number, number>;
  readonly slots: readonly { readonly id: number; readonly bytes: number }[];
  readonly bytesWithReuse: number;
  readonly bytesWithoutReuse: number;
  readonly peakLiveBytes: number;
}

/**
 * Kernels of equal source in groups: `kernels[i]` is the first kernel whose source kernel i shares
 * (share_sources.ts); `epilogues` likewise for the epilogues of library GEMMs (-1: none).
 */
export interface SharedSources {
  readonly kernels: readonly number[];
  readonly epilogues: readonly number[];
}

/** A kernel that a flash-attention kernel computes (flash-attention stage): which one, for which site. */
export interface FlashPart {
  readonly what: "forward" | "backward" | "backward_dk_dv" | "backward_dq";
  readonly site: FlashSite;
}

/**
 * The attentions the flash kernels compute, decided before fusion (flash-attention stage): a kernel per part,
 * which fusion takes as it is, and the values they read that must be stored (the GEMM products they read
 * token-major, or the heads themselves).
 */
export interface FlashClaims {
  readonly kernels: readonly {
    readonly part: FlashPart;
    readonly roots: NodeId[];
    readonly members: Set<NodeId>;
  }[];
  readonly stored: ReadonlySet<NodeId>;
}

/**
 * A kernel whose CUDA source is written directly rather than rendered from its (empty-bodied) kernel IR,
 * with the traffic and work its IR cannot count: the flash-attention kernels (stages/flash_attention.ts).
 */
export interface FlashOverride {
  readonly source: TargetKernel;
  readonly flops: number;
  readonly bytesRead: number;
  readonly bytesWritten: number;
}

export interface KernelState {
  /** The graph after the graph passes, which the plan executes. */
  readonly graph: Graph;
  readonly options: KernelOptions;
  /** False when the unfused baseline was asked for, or the fusion stage skipped: later fusion stages do nothing. */
  readonly fusing: boolean;
  /** Nodes fusion must write to a buffer although a reader could compute them (weight-copies stage). */
  readonly forcedRoots?: ReadonlySet<NodeId>;
  /** The matmuls that run as library calls, decided on the graph (gemm-calls stage); absent: none do. */
  readonly graphCalls?: GraphCalls;
  readonly fusion?: FusionResult;
  readonly storage?: StoragePlan;
  /** The attentions flash kernels compute (flash-attention stage, CUDA only). */
  readonly flashClaims?: FlashClaims;
  /** The flash kernels, by their first root (their roots stay as fusion made them). */
  readonly flashParts?: ReadonlyMap<NodeId, FlashPart>;
  /** Each flash site's log-sum-exp buffer, by the site's O node (buffers stage). */
  readonly flashLse?: ReadonlyMap<NodeId, number>;
  /** Graph outputs that view a piece of a flat vector: output -> the piece (output-views stage). */
  readonly views?: ReadonlyMap<NodeId, NodeId>;
  /** The matmul kernels that run as library calls, by kernel index (library-calls stage). */
  readonly calls?: ReadonlyMap<number, GemmCall>;
  /** The scratch product of each call that writes one, by kernel index (buffers stage). */
  readonly scratchOf?: ReadonlyMap<number, number>;
  readonly buffers?: readonly StateBuffer[];
  readonly bufferOfNode?: ReadonlyMap<NodeId, number>;
  /** Output buffers that view another's bytes (buffers stage, output_views.ts): view -> the buffer viewed. */
  readonly viewOf?: ReadonlyMap<number, number>;
  /** One per fused kernel, in fusion's order. */
  readonly kernels?: readonly Kernel[];
  /** Library GEMMs by kernel index, and one decision per matmul kernel (CUDA only). */
  readonly gemmOf?: ReadonlyMap<number, LibraryGemm>;
  readonly gemms?: readonly GemmDecision[];
  readonly schedule?: Schedule;
  /** Flash-attention kernels by kernel index (lower stage); emit takes their sources from these. */
  readonly flash?: ReadonlyMap<number, FlashOverride>;
  /** Update buffers written over what they update (in-place-updates stage): value buffer -> its target. */
  readonly aliasOf?: ReadonlyMap<number, number>;
  readonly memory?: MemoryLayout;
  /** Whether the kernels were legalized for the target (its rules, legalize.ts). */
  readonly legalized?: boolean;
  readonly shared?: SharedSources;
  readonly plan?: Plan;
}

/** A part of the state a stage needs; a missing one is an ordering mistake in the stage list. */
export function need<T>(value: T | undefined, what: string, stage: string): T {
  if (value === undefined) {
    throw new Error(`internal: stage '${stage}' needs ${what}, which no earlier stage made`);
  }
  return value;
}

/**
 * The lowering's view of the state: buffers, stored dtypes, and which nodes no kernel computes. With
 * `"nodes"`, before buffers exist: a node's "buffer" is the node itself (library-calls).
 */
export function valueContext(s: KernelState, stage: string, by?: "nodes"): Omit<ValueContext, "members"> {
  const fusion = need(s.fusion, "the fusion", stage);
  const storage = need(s.storage, "the storage plan", stage);
  const bufferOfNode = by ? undefined : need(s.bufferOfNode, "buffers", stage);
  return {
    graph: s.graph,
    storedType: storage.storedType,
    computedAnywhere: (id: NodeId) => fusion.kernelOf[id] < 0 && !fusion.materialized.has(id),
    bufferOf: (id: NodeId) => {
      if (!bufferOfNode) return id;
      const b = bufferOfNode.get(id);
      if (b === undefined) throw new Error(`internal: %${id} has no buffer`);
      return b;
    },
  };
}

/** The dtype a node's buffer holds (its own when no storage plan was made). */
export const storedTypeOf = (s: KernelState, id: NodeId): DType =>
  s.storage?.storedType(id) ?? s.graph.nodes[id].type.dtype;
