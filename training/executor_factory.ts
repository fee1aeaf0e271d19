/**
 * Opens the step executor a training run uses: the compiled step on the backend engine/choose_backend.ts
 * picks (CUDA, then WebGPU, then the reference interpreter), with the reason for the log.
 */
import { compileForCuda } from "../engine/cuda_backend.ts";
import { type BackendChoice, type BackendRequest, chooseBackend } from "../engine/choose_backend.ts";
import { compileForWebGPU } from "../engine/webgpu_backend.ts";
import type { Graph } from "../ir/mod.ts";
import type { Plan } from "../runtime/plan.ts";
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

export async function openExecutor(
  g: Graph,
  request: BackendRequest,
  fuse: boolean,
): Promise<OpenedExecutor> {
  return await openOn(await chooseBackend(request), g, fuse);
}

/** Compiles `g` for a backend already chosen (the precision may depend on which one it is). */
export async function openOn(choice: BackendChoice, g: Graph, fuse: boolean): Promise<OpenedExecutor> {
  switch (choice.kind) {
    case "cuda": {
      const { executor, compiled } = await compileForCuda(choice.cuda, g, fuse);
      return {
        executor,
        backend: "cuda",
        why: choice.why,
        kernels: compiled.plan.kernels.length,
        plan: compiled.plan,
      };
    }
    case "webgpu": {
      const { executor, compiled } = await compileForWebGPU(choice.gpu, g, fuse);
      return {
        executor,
        backend: "webgpu",
        why: choice.why,
        kernels: compiled.plan.kernels.length,
        plan: compiled.plan,
      };
    }
    case "reference":
      return { executor: new ReferenceExecutor(g), backend: "reference", why: choice.why, kernels: 0 };
  }
}
