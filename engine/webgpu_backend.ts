/**
 * The WebGPU backend: compiles a graph (fused, or one kernel per op) to a Plan with WGSL kernels and runs
 * it on `navigator.gpu`. This module wires the compiler to the runtime; neither imports the other.
 */
import { emitWGSL } from "../compiler/codegen/wgsl.ts";
import { type Compiled, compileGraph } from "../compiler/compile.ts";
import type { Kernel } from "../compiler/kernel_ir/ir.ts";
import type { Graph } from "../ir/mod.ts";
import type { Backend } from "../runtime/backend.ts";
import { type GpuContext, openWebGPU } from "../runtime/webgpu/device.ts";
import { WebGPUExecutor } from "../runtime/webgpu/executor.ts";
import { formatProfile } from "../runtime/webgpu/timing.ts";
import { readDebugFlags } from "../compiler/debug.ts";

/** Kernels without their name and description, so identical fusions share code and a pipeline. */
export const emitWGSLShared = (k: Kernel) => emitWGSL({ ...k, name: k.kind, about: [] });

export interface CompiledOnGpu {
  readonly compiled: Compiled;
  readonly executor: WebGPUExecutor;
}

export async function compileForWebGPU(ctx: GpuContext, g: Graph, fuse: boolean): Promise<CompiledOnGpu> {
  const compiled = compileGraph(g, { fuse, emitters: { wgsl: emitWGSLShared } });
  const executor = await WebGPUExecutor.create(ctx, compiled.plan);
  return { compiled, executor };
}

export class WebGPUBackendError extends Error {}

/** Opens the GPU or explains why it cannot. */
export async function requireWebGPU(): Promise<GpuContext> {
  const r = await openWebGPU();
  if ("unavailable" in r) throw new WebGPUBackendError(`--backend webgpu: ${r.unavailable}`);
  return r;
}

/**
 * A Backend that compiles each graph it is given once (by object identity) and runs it with the feeds;
 * parameters are fed like inputs, by name.
 */
export function webgpuBackend(ctx: GpuContext, opts: { fuse?: boolean } = {}): Backend {
  const cache = new WeakMap<Graph, Promise<CompiledOnGpu>>();
  const profileLaunches = readDebugFlags().level >= 2;
  return {
    name: opts.fuse === false ? "webgpu-unfused" : "webgpu",
    async run(g, feeds, outputs) {
      let c = cache.get(g);
      if (!c) {
        c = compileForWebGPU(ctx, g, opts.fuse !== false);
        cache.set(g, c);
      }
      const { executor } = await c;
      const result = await executor.run(feeds, outputs);
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
