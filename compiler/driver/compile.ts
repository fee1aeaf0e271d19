/**
 * The compiler driver: one named-pass pipeline from a graph to a Plan. The graph passes (simplification)
 * run first, then the kernel-level stages (compiler/stages/: fusion, storage precision, lowering,
 * vectorizing, library calls, schedule, memory plan, legalization, shared sources, emission), every one
 * with the same hooks (compiler/pipeline/stage_runner.ts). compiler/README.md lists them in order. Command-line tools
 * and the runtimes' callers go through here.
 */
import type { Graph } from "../../ir/mod.ts";
import { type DebugFlags, readDebugFlags } from "../pipeline/debug.ts";
import type { FusionResult } from "../fusion/types.ts";
import { cse } from "../passes/cse.ts";
import { decompose } from "../passes/decompose.ts";
import { dce } from "../passes/dce.ts";
import { simplify } from "../passes/simplify.ts";
import {
  makePassContext,
  type PassContext,
  runPipeline,
  runStages,
  type StageInfo,
  stageInfo,
} from "../pipeline/stage_runner.ts";
import { KERNEL_LEVEL, KERNEL_STAGES } from "../stages/stage_list.ts";
import type { GemmDecision, KernelOptions, KernelState } from "../stages/state.ts";
import type { Kernel } from "../kernel_ir/ir.ts";
import type { Plan } from "../../plan/plan.ts";
import type { StoragePlan } from "../storage/storage_precision.ts";

export interface BuiltPlan {
  readonly plan: Plan;
  readonly kernels: readonly Kernel[];
  /** One entry per matmul kernel when compiled for CUDA (empty otherwise). */
  readonly gemms: readonly GemmDecision[];
  readonly memory: {
    readonly bytesWithReuse: number;
    readonly bytesWithoutReuse: number;
    readonly peakLiveBytes: number;
  };
}

export interface CompileOptions extends KernelOptions {
  readonly flags?: DebugFlags;
}

export interface Compiled extends BuiltPlan {
  /** The graph the plan executes: after simplification and the kernel stages' rewrites (column-sums). */
  readonly graph: Graph;
  readonly fusion: FusionResult;
  /** The stored dtype of every materialized value. */
  readonly storage: StoragePlan;
  readonly passTimings: readonly { pass: string; ms: number }[];
}

/** The graph passes: composites decomposed (not skippable: no stage after it knows them), then simplified. */
export const SIMPLIFY_PASSES = [decompose, simplify, cse, dce];

/** Every stage of the compile in the order it runs, and whether SKIP_PASSES may name it. */
export const COMPILE_STAGES: readonly StageInfo[] = [
  ...SIMPLIFY_PASSES.map((p) => ({ name: p.name, skippable: p !== decompose })),
  ...KERNEL_STAGES.map(stageInfo),
];

/** The kernel-level stages over a simplified graph; the final state holds the Plan. */
export function runKernelStages(
  graph: Graph,
  options: KernelOptions,
  ctx: PassContext,
  stages = KERNEL_STAGES,
): ReturnType<typeof runStages<KernelState>> {
  return runStages<KernelState>(
    { graph, options, fusing: options.fuse },
    stages,
    KERNEL_LEVEL,
    ctx,
    COMPILE_STAGES,
  );
}

export function compileGraph(g: Graph, opts: CompileOptions): Compiled {
  const ctx = makePassContext(opts.flags ?? readDebugFlags());
  const piped = runPipeline(g, SIMPLIFY_PASSES, ctx, { stages: COMPILE_STAGES });
  const { state, records } = runKernelStages(piped.graph, opts, ctx);
  const passTimings = [...piped.timings, ...records].map((t) => ({ pass: t.pass, ms: t.ms }));
  return {
    ...builtPlanOf(state),
    graph: state.graph,
    fusion: state.fusion!,
    storage: state.storage!,
    passTimings,
  };
}

/** What a finished run of the stages built. */
export function builtPlanOf(s: KernelState): BuiltPlan {
  const m = s.memory!;
  return {
    plan: s.plan!,
    kernels: s.kernels!,
    gemms: s.gemms ?? [],
    memory: {
      bytesWithReuse: m.bytesWithReuse,
      bytesWithoutReuse: m.bytesWithoutReuse,
      peakLiveBytes: m.peakLiveBytes,
    },
  };
}
