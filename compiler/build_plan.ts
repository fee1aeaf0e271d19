/**
 * From a fused graph to a Plan, for callers that fuse on their own (benchmarks that compare fusion
 * options): the kernel-level stages after fusion (compiler/stages/mod.ts PLAN_STAGES), run quietly. The
 * compiler driver (compile.ts) runs the same stages inside its pipeline.
 */
import type { DType, Graph, NodeId } from "../ir/mod.ts";
import type { Plan } from "../plan/plan.ts";
import type { FusionResult } from "./fusion/types.ts";
import type { Kernel } from "./kernel_ir/ir.ts";
import { quietContext, runStages } from "./pipeline.ts";
import { KERNEL_LEVEL, PLAN_STAGES } from "./stages/mod.ts";
import type { EmitTarget, Emitter, GemmDecision, KernelState, Target } from "./stages/state.ts";
import { fullStorage } from "./storage_precision.ts";
import { storageStage } from "./stages/storage.ts";

export type { EmitTarget, Emitter, GemmDecision, Target };

export interface BuildOptions {
  /**
   * With a CUDA emitter: give matmul kernels that qualify a cuBLASLt variant (PlanKernel.cudaGemm) beside
   * their template code. Default true.
   */
  readonly libraryGemms?: boolean;
}

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

export function buildPlan(
  g: Graph,
  fusion: FusionResult,
  emitters: Partial<Record<EmitTarget, Emitter>>,
  /** The dtype each materialized node is stored in (compiler/storage_precision.ts); default its own. */
  storedType: (id: NodeId) => DType = (id) => g.nodes[id].type.dtype,
  options: BuildOptions = {},
): BuiltPlan {
  const storage = { ...fullStorage(g), storedType };
  const stages = PLAN_STAGES.filter((s) => s !== storageStage);
  const { state } = runStages(
    {
      graph: g,
      options: { fuse: true, emitters, libraryGemms: options.libraryGemms },
      fusing: true,
      fusion,
      storage,
    },
    stages,
    KERNEL_LEVEL,
    quietContext(),
  );
  return builtPlanOf(state);
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
