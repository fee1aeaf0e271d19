/**
 * Opens the step executor a training run uses: the compiled, fused step on the best device present (CUDA,
 * then WebGPU), or the reference interpreter. The choice and why it was made are returned for the log.
 */
import { compileGraph } from "../compiler/compile.ts";
import { emitWGSLShared } from "../engine/webgpu_backend.ts";
import type { Graph } from "../ir/mod.ts";
import type { StepExecutor } from "../runtime/backend.ts";
import { ReferenceExecutor } from "../runtime/reference/executor.ts";
import { openWebGPU } from "../runtime/webgpu/device.ts";
import { WebGPUExecutor } from "../runtime/webgpu/executor.ts";
import type { BackendChoice } from "./options.ts";

export class BackendUnavailableError extends Error {
  override name = "BackendUnavailableError";
}

export interface OpenedExecutor {
  readonly executor: StepExecutor;
  /** "webgpu (llvmpipe ...)", "reference", ... */
  readonly backend: string;
  readonly why: string;
  /** Kernel launches per step (0 for the reference interpreter). */
  readonly kernels: number;
}

export type CudaOpener = (g: Graph, fuse: boolean) => Promise<OpenedExecutor | { unavailable: string }>;

/** Set by the CUDA engine when it is linked in (engine/cuda_backend.ts), so this file need not import FFI. */
let openCuda: CudaOpener | undefined;
export function registerCuda(opener: CudaOpener): void {
  openCuda = opener;
}

export async function openExecutor(g: Graph, choice: BackendChoice, fuse: boolean): Promise<OpenedExecutor> {
  const reasons: string[] = [];
  if (choice === "cuda" || choice === "auto") {
    const r = openCuda ? await openCuda(g, fuse) : { unavailable: "the CUDA backend is not built in" };
    if (!("unavailable" in r)) return r;
    if (choice === "cuda") throw new BackendUnavailableError(`--backend cuda: ${r.unavailable}`);
    reasons.push(`no CUDA (${r.unavailable})`);
  }
  if (choice === "webgpu" || choice === "auto") {
    const ctx = await openWebGPU();
    if ("unavailable" in ctx) {
      if (choice === "webgpu") throw new BackendUnavailableError(`--backend webgpu: ${ctx.unavailable}`);
      reasons.push(`no WebGPU (${ctx.unavailable})`);
    } else {
      const compiled = compileGraph(g, { fuse, emitters: { wgsl: emitWGSLShared } });
      const executor = await WebGPUExecutor.create(ctx, compiled.plan);
      return {
        executor,
        backend: `webgpu (${ctx.adapterName ?? "adapter"})`,
        why: choice === "auto" ? [...reasons, "WebGPU adapter found"].join("; ") : "--backend webgpu",
        kernels: compiled.plan.kernels.length,
      };
    }
  }
  return {
    executor: new ReferenceExecutor(g),
    backend: "reference",
    why: choice === "auto" ? [...reasons, "falling back to the CPU interpreter (slow)"].join("; ") : "--backend reference",
    kernels: 0,
  };
}
