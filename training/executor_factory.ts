/**
 * Opens the step executor a training run uses: the compiled step on the backend engine/choose_backend.ts
 * picks (CUDA, then WebGPU, then the reference interpreter), with the reason for the log.
 */
import { compileForCuda } from "../engine/cuda_backend.ts";
import type { BackendChoice } from "../engine/choose_backend.ts";
import { compileForWebGPU } from "../engine/webgpu_backend.ts";
import type { Graph } from "../ir/mod.ts";
import type { Plan } from "../plan/plan.ts";
import type { StepExecutor } from "../runtime/backend.ts";
import { ReferenceExecutor } from "../runtime/reference/executor.ts";

export interface OpenedExecutor {
  readonly executor: StepExecutor;
  /** "cuda", "webgpu" or "reference". */
  readonly backend: string;
  /** One line: the device and why this backend was chosen. */
  readonly why: string;
  /** Kernel launches per step (0 for the reference interpreter). */
  readonly kernels: number;
  /** The compiled plan (absent for the reference interpreter). */
  readonly plan?: Plan;
}

/** Compiles `g` for a backend already chosen (the precision may depend on which one it is). */
export async function openOn(choice: BackendChoice, g: Graph, fuse: boolean): Promise<OpenedExecutor> {
  if (choice.kind === "reference") {
    return { executor: new ReferenceExecutor(g), backend: "reference", why: choice.why, kernels: 0 };
  }
  const { executor, compiled } = choice.kind === "cuda"
    ? await compileForCuda(choice.cuda, g, fuse)
    : await compileForWebGPU(choice.gpu, g, fuse);
  return {
    executor,
    backend: choice.kind,
    why: choice.why,
    kernels: compiled.plan.kernels.length,
    plan: compiled.plan,
  };
}
