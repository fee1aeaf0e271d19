/**
 * The CUDA backend: compiles a graph (fused, or one kernel per op) to a Plan with CUDA C kernels and runs
 * it on an NVIDIA GPU through the driver API (runtime/cuda). This module wires the compiler to the
 * runtime; neither imports the other.
 */
import { emitCUDA } from "../compiler/codegen/cuda.ts";
import { type Compiled, compileGraph } from "../compiler/compile.ts";
import { readDebugFlags } from "../compiler/debug.ts";
import type { Kernel } from "../compiler/kernel_ir/ir.ts";
import type { Graph } from "../ir/mod.ts";
import type { Backend } from "../runtime/backend.ts";
import { type CudaContext, openCuda } from "../runtime/cuda/context.ts";
import { CudaUnavailableError } from "../runtime/cuda/errors.ts";
import { CudaExecutor } from "../runtime/cuda/executor.ts";
import { formatProfile } from "../runtime/webgpu/timing.ts";
import { CudaBackendError } from "./choose_backend.ts";

export { CudaBackendError };

/**
 * Kernels without their name and description, so identical fusions (the same pattern in every encoder
 * layer) have identical source: one NVRTC compile, one cache entry and one module for all of them.
 */
export const emitCUDAShared = (k: Kernel) => emitCUDA({ ...k, name: k.kind, about: [] });

export interface CompiledOnCuda {
  readonly compiled: Compiled;
  readonly executor: CudaExecutor;
}

export async function compileForCuda(ctx: CudaContext, g: Graph, fuse: boolean): Promise<CompiledOnCuda> {
  const compiled = compileGraph(g, { fuse, emitters: { cuda: emitCUDAShared } });
  const executor = await CudaExecutor.create(ctx, compiled.plan);
  return { compiled, executor };
}

/** Opens the GPU through the driver, or explains in one line why it cannot. */
export function requireCuda(): CudaContext {
  try {
    return openCuda();
  } catch (e) {
    if (e instanceof CudaUnavailableError) throw new CudaBackendError(`--backend cuda: ${e.message}`);
    throw e;
  }
}

/**
 * A Backend that compiles each graph it is given once (by object identity) and runs it with the feeds.
 * Parameters are fed like inputs, by name, but uploaded only when the caller passes a different array
 * than last time: inference calls run() per batch with the same weights, which then cross PCIe once.
 */
export function cudaBackend(ctx: CudaContext, opts: { fuse?: boolean } = {}): Backend {
  const cache = new WeakMap<Graph, Promise<CompiledOnCuda>>();
  const uploaded = new WeakMap<CudaExecutor, Map<string, ArrayLike<number>>>();
  const profileLaunches = readDebugFlags().level >= 2;
  return {
    name: opts.fuse === false ? "cuda-unfused" : "cuda",
    async run(g, feeds, outputs) {
      let c = cache.get(g);
      if (!c) {
        c = compileForCuda(ctx, g, opts.fuse !== false);
        cache.set(g, c);
      }
      const { executor } = await c;
      let seen = uploaded.get(executor);
      if (!seen) uploaded.set(executor, seen = new Map());
      const fresh: Record<string, ArrayLike<number>> = {};
      for (const [name, data] of Object.entries(feeds)) {
        const isParam = executor.plan.params[name] !== undefined;
        if (isParam && seen.get(name) === data) continue;
        fresh[name] = data;
        if (isParam) seen.set(name, data);
      }
      const result = await executor.run(fresh, outputs);
      // DEBUG=2: one line per kernel launch (time, GB/s, GFLOP/s), from a profiled re-run of the step.
      if (profileLaunches) {
        for (const line of formatProfile(await executor.profile(1))) console.error(line);
      }
      const out = new Map<string, Float32Array>();
      for (const [name, v] of Object.entries(result)) {
        out.set(name, v instanceof Float32Array ? v : Float32Array.from(v));
      }
      return out;
    },
  };
}
