/**
 * The kernel-level stages in the order they run, and how their state is printed and checked. The graph
 * passes before them are compile.ts's SIMPLIFY_PASSES; compiler/README.md lists both (a test keeps it in
 * step with COMPILE_STAGES).
 */
import type { Stage, StageLevel } from "../pipeline/stage_runner.ts";
import { buffersStage } from "./buffers.ts";
import { columnSumsStage } from "./column_sums.ts";
import { emitStage } from "./emit.ts";
import { flashAttentionStage } from "./flash_attention.ts";
import { gemmSumsStage } from "./gemm_sums.ts";
import {
  attentionStage,
  consumerStage,
  fusionStage,
  rowBlockStage,
  sameWriterStage,
  siblingStage,
  smallReductionsStage,
} from "./fusion.ts";
import { inPlaceUpdatesStage } from "./in_place_updates.ts";
import { legalizeStage } from "./legalize.ts";
import { gemmCallsStage, libraryCallsStage } from "./library_calls.ts";
import { outputViewsStage } from "./output_views.ts";
import { lowerStage, vectorizeStage } from "./lower.ts";
import { memoryStage } from "./memory.ts";
import { printState } from "./dump.ts";
import { scheduleStage } from "./schedule.ts";
import { shareSourcesStage } from "./share_sources.ts";
import type { KernelState } from "./state.ts";
import { storageStage } from "./storage.ts";
import { verifyState } from "./invariants.ts";
import { weightCopiesStage } from "./weight_copies.ts";

export const FUSION_STAGES: readonly Stage<KernelState>[] = [
  columnSumsStage,
  weightCopiesStage,
  gemmCallsStage,
  flashAttentionStage,
  fusionStage,
  attentionStage,
  siblingStage,
  consumerStage,
  sameWriterStage,
  gemmSumsStage,
  rowBlockStage,
  smallReductionsStage,
];

/** From the storage choice to the Plan: what follows fusion. */
export const PLAN_STAGES: readonly Stage<KernelState>[] = [
  storageStage,
  outputViewsStage,
  libraryCallsStage,
  buffersStage,
  lowerStage,
  vectorizeStage,
  scheduleStage,
  inPlaceUpdatesStage,
  memoryStage,
  legalizeStage,
  emitStage,
  shareSourcesStage,
];

export const KERNEL_STAGES: readonly Stage<KernelState>[] = [...FUSION_STAGES, ...PLAN_STAGES];

const count = (s: KernelState) =>
  s.plan
    ? `${s.plan.kernels.length} plan kernels`
    : s.kernels
    ? `${s.kernels.length} kernels`
    : s.fusion
    ? `${s.fusion.kernels.length} fused kernels`
    : "no kernels yet";

export const KERNEL_LEVEL: StageLevel<KernelState> = {
  ext: "kernels",
  noun: "kernels",
  label: "kernel stages",
  dumpBefore: false,
  print: printState,
  check: (before, after, stage) => {
    if (after.graph.precision !== before.graph.precision) {
      throw new Error(`stage '${stage}' changed the graph's precision to ${after.graph.precision}`);
    }
    verifyState(after, stage);
  },
  summary: (before, after) => (after === before ? `unchanged (${count(after)})` : count(after)),
};
