/**
 * The backend table: one row per backend `--backend` can name, with its probe, capabilities, emitter and
 * executor (engine/backend_row.ts says what each field means). Every command chooses through
 * engine/choose_backend.ts, which walks this table; a new backend is a new row here. This is the one place
 * the compiler (targets, compileGraph) and the runtimes (devices, executors) meet.
 */
import { compileGraph, type CompileOptions } from "../compiler/driver/compile.ts";
import { decomposeComposites } from "../compiler/passes/decompose.ts";
import { TARGETS, webgpuTarget } from "../compiler/targets/target.ts";
import type { Graph } from "../ir/mod.ts";
import type { Plan } from "../plan/plan.ts";
import { openCpu } from "../runtime/cpu/cpu_context.ts";
import { CpuUnavailableError } from "../runtime/cpu/cpu_errors.ts";
import { type CpuContext, CpuExecutor } from "../runtime/cpu/cpu_executor.ts";
import { type CudaContext, openCuda } from "../runtime/cuda/cuda_context.ts";
import { CudaUnavailableError } from "../runtime/cuda/cuda_errors.ts";
import { CudaExecutor } from "../runtime/cuda/cuda_executor.ts";
import { referenceBackend } from "../runtime/reference/reference_backend.ts";
import { ReferenceExecutor } from "../runtime/reference/reference_executor.ts";
import { type GpuContext, openWebGPU } from "../runtime/webgpu/device.ts";
import { softwareAdapter } from "../runtime/webgpu/software.ts";
export { softwareAdapter };
import { WebGPUExecutor } from "../runtime/webgpu/webgpu_executor.ts";
import type { BackendRow, CompiledStep } from "./backend_row.ts";
import { compiledBackend } from "./device_backend.ts";
import { refreshingLowCopies } from "./low_copy_refresh.ts";

/**
 * A compiled row's `compile`: the graph through the compiler for the device's target (the share-sources
 * stage gives identical fusions, the same pattern in every encoder layer, one source: one shader or NVRTC
 * compile, one cache entry, one pipeline or module for all of them), then into its executor.
 */
function compiling<Ctx, Ex extends CompiledStep["executor"]>(
  load: (ctx: Ctx, plan: Plan) => Promise<Ex>,
  /**
   * The device's target, the most buffers one kernel may bind on it (fusion stays within it; unlimited if
   * absent) and the most bytes one binding may see.
   */
  tuning: (ctx: Ctx) => Pick<CompileOptions, "target" | "maxBindings" | "maxBindingBytes">,
): (ctx: Ctx, g: Graph, fuse: boolean) => Promise<Required<CompiledStep<Ex>>> {
  return async (ctx, g, fuse) => {
    const compiled = compileGraph(g, { fuse, ...tuning(ctx) });
    // A plan that keeps weight copies refreshes them on every weight write (engine/low_copy_refresh.ts).
    return { compiled, executor: refreshingLowCopies(await load(ctx, compiled.plan), compiled.plan) };
  };
}

/** The reference interpreter opens nothing; its context only names it. */
export interface ReferenceContext {
  readonly description: string;
}

export const REFERENCE: BackendRow<ReferenceContext, CompiledStep<ReferenceExecutor>, "reference"> = {
  name: "reference",
  label: "reference interpreter",
  preference: 0,
  dtypes: ["f32", "f16", "bf16"],
  autoPrecision: "fp32",
  probe: () => Promise.resolve({ description: "the reference interpreter (CPU)" }),
  says: () => "",
  device: (ctx) => ctx.description,
  limits: () => ({}),
  // Composites run as their primitives, as on every compiled backend (the interpreter's own attention is
  // the tests' oracle for that decomposition).
  compile: (_ctx, g) => Promise.resolve({ executor: new ReferenceExecutor(decomposeComposites(g)) }),
  graphBackend: (_ctx, opts) => {
    const run = referenceBackend(opts.precision);
    return { ...run, run: (g, feeds, outputs) => run.run(decomposeComposites(g), feeds, outputs) };
  },
};

export const WEBGPU: BackendRow<GpuContext, Required<CompiledStep<WebGPUExecutor>>, "webgpu"> = {
  name: "webgpu",
  label: "WebGPU",
  preference: 2,
  // f16 needs the adapter's shader-f16 feature; the executor refuses f16 kernels on a device without it.
  dtypes: ["f32", "f16"],
  lacks: { bf16: "WGSL has no bf16 type" },
  language: "wgsl",
  autoPrecision: "fp32",
  autoRefusal: (ctx) => softwareAdapter(ctx),
  probe: () => openWebGPU(),
  says: (ctx, auto) => `${auto ? "WebGPU " : ""}adapter '${ctx.description}'`,
  device: (ctx) => ctx.description,
  // Training cuts its flat parameter and moment vectors into groups within these (compiler/optimizer).
  limits: (ctx) => ({
    maxStorageBindingBytes: ctx.limits.maxStorageBufferBindingSize,
    maxBufferBytes: ctx.limits.maxBufferSize,
  }),
  // The adapter's own storage-buffer budget (requested explicitly in runtime/webgpu/device.ts), so no
  // fused kernel binds more than the device allows (Chrome's SwiftShader: 10; lavapipe: 32).
  compile: compiling((ctx, plan) => WebGPUExecutor.create(ctx, plan), (ctx) => ({
    target: webgpuTarget(softwareAdapter(ctx) !== undefined),
    maxBindings: ctx.limits.maxStorageBuffersPerShaderStage,
    // A tensor over the binding limit is bound as several ranges of one buffer (plan/binding_ranges.ts).
    maxBindingBytes: ctx.limits.maxStorageBufferBindingSize,
  })),
  graphBackend: (ctx, opts) =>
    compiledBackend((g, fuse) => WEBGPU.compile(ctx, g, fuse), { name: "webgpu", ...opts }),
};

export const CUDA: BackendRow<CudaContext, Required<CompiledStep<CudaExecutor>>, "cuda"> = {
  name: "cuda",
  label: "CUDA",
  preference: 3,
  dtypes: ["f32", "f16", "bf16"],
  language: "cuda",
  // Mixed precision with dynamic loss scaling: what tensor cores are for.
  autoPrecision: "fp16",
  probe() {
    try {
      return Promise.resolve(openCuda());
    } catch (e) {
      if (e instanceof CudaUnavailableError) return Promise.resolve({ unavailable: e.message });
      throw e;
    }
  },
  says: (ctx) => ctx.description,
  device: (ctx) => ctx.description,
  limits: () => ({}),
  compile: compiling((ctx, plan) => CudaExecutor.create(ctx, plan), () => ({ target: TARGETS["cuda-sm90"] })),
  graphBackend: (ctx, opts) =>
    compiledBackend((g, fuse) => CUDA.compile(ctx, g, fuse), { name: "cuda", paramsStay: true, ...opts }),
};

export const CPU: BackendRow<CpuContext, Required<CompiledStep<CpuExecutor>>, "cpu"> = {
  name: "cpu",
  label: "CPU",
  // Above the reference interpreter; below WebGPU, which `auto` takes only on a real GPU (softwareAdapter).
  preference: 1,
  dtypes: ["f32", "f16", "bf16"],
  language: "c",
  // sgemm is f32, and a CPU computes f16 no faster than f32: full precision is the fast choice here.
  autoPrecision: "fp32",
  probe() {
    try {
      return Promise.resolve(openCpu());
    } catch (e) {
      if (e instanceof CpuUnavailableError) return Promise.resolve({ unavailable: e.message });
      throw e;
    }
  },
  says: (ctx, auto) => `${auto ? "CPU " : ""}${ctx.description}`,
  device: (ctx) => ctx.description,
  limits: () => ({}),
  compile: compiling((ctx, plan) => CpuExecutor.create(ctx, plan), () => ({ target: TARGETS.cpu })),
  graphBackend: (ctx, opts) =>
    compiledBackend((g, fuse) => CPU.compile(ctx, g, fuse), { name: "cpu", paramsStay: true, ...opts }),
};

/** Every backend, in the order `--backend` lists them. */
const ROWS = [REFERENCE, CPU, WEBGPU, CUDA] as const;
export const BACKENDS: readonly BackendRow[] = ROWS;

export type BackendName = (typeof ROWS)[number]["name"];
export type BackendRequest = "auto" | BackendName;
/** The `--backend` values: `auto` and every row's name. */
export const BACKEND_NAMES: readonly BackendRequest[] = ["auto", ...ROWS.map((r) => r.name)];
