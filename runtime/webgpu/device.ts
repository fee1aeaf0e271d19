/**
 * Opening a WebGPU device for the runtime. The adapter's own limits are requested explicitly (a device
 * gets WebGPU's low defaults otherwise, e.g. 128 MiB bindings or 16 KiB workgroup memory), and the
 * optional features the runtime can use (shader-f16, timestamp-query) when the adapter has them.
 */

/** The limits the runtime depends on; each is requested at the adapter's value. */
const WANTED_LIMITS = [
  "maxStorageBufferBindingSize",
  "maxBufferSize",
  "maxStorageBuffersPerShaderStage",
  "maxBindingsPerBindGroup",
  "maxComputeWorkgroupStorageSize",
  "maxComputeInvocationsPerWorkgroup",
  "maxComputeWorkgroupSizeX",
  "maxComputeWorkgroupsPerDimension",
] as const;

const WANTED_FEATURES: readonly GPUFeatureName[] = ["shader-f16", "timestamp-query"];

export type GpuLimits = Readonly<Record<(typeof WANTED_LIMITS)[number], number>>;

export interface GpuContext {
  readonly adapter: GPUAdapter;
  readonly device: GPUDevice;
  /** Adapter description for logs and benchmark records, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)". */
  readonly description: string;
  readonly hasF16: boolean;
  readonly hasTimestamps: boolean;
  readonly limits: GpuLimits;
  /** Why the device was lost, once it has been; executors refuse to run on a lost device. */
  lost: string | null;
  /** Errors no error scope captured, oldest first; executors report and clear them. */
  readonly uncaptured: string[];
}

export interface OpenOptions {
  readonly powerPreference?: GPUPowerPreference;
}

/** A device with the adapter's limits and features, or the reason there is none. */
export async function openWebGPU(opts: OpenOptions = {}): Promise<GpuContext | { unavailable: string }> {
  const gpu = (globalThis.navigator as Navigator | undefined)?.gpu;
  if (!gpu) return { unavailable: "navigator.gpu is not available in this runtime" };
  let adapter: GPUAdapter | null;
  try {
    adapter = await gpu.requestAdapter({ powerPreference: opts.powerPreference ?? "high-performance" });
  } catch (e) {
    return { unavailable: `requestAdapter failed: ${e instanceof Error ? e.message : e}` };
  }
  if (!adapter) {
    return {
      unavailable: "no WebGPU adapter found (on Linux without a GPU: install mesa-vulkan-drivers and set " +
        "DENO_WEBGPU_BACKEND=vulkan)",
    };
  }
  const requiredFeatures = WANTED_FEATURES.filter((f) => adapter.features.has(f));
  const requiredLimits: Record<string, number> = {};
  for (const name of WANTED_LIMITS) requiredLimits[name] = adapter.limits[name];
  let device: GPUDevice;
  try {
    device = await adapter.requestDevice({ label: "bertfuse", requiredFeatures, requiredLimits });
  } catch (e) {
    return { unavailable: `requestDevice failed: ${e instanceof Error ? e.message : e}` };
  }
  const limits = {} as Record<(typeof WANTED_LIMITS)[number], number>;
  for (const name of WANTED_LIMITS) limits[name] = device.limits[name];
  const info = adapter.info;
  const ctx: GpuContext = {
    adapter,
    device,
    description: info.description || [info.vendor, info.architecture, info.device].filter(Boolean).join(" "),
    hasF16: device.features.has("shader-f16"),
    hasTimestamps: device.features.has("timestamp-query"),
    limits,
    lost: null,
    uncaptured: [],
  };
  device.lost.then((l) => {
    ctx.lost = l.message || String(l.reason);
  });
  device.addEventListener("uncapturederror", (ev) => {
    // Recorded for the executor to raise; preventDefault keeps the runtime from also printing it.
    ev.preventDefault();
    ctx.uncaptured.push((ev as GPUUncapturedErrorEvent).error.message);
  });
  return ctx;
}

/** Destroys the device of `ctx`; buffers and pipelines made on it become unusable. */
export function closeWebGPU(ctx: GpuContext): void {
  ctx.device.destroy();
}
