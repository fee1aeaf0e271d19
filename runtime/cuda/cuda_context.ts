/**
 * What every CUDA executor of a process shares: the driver with its context, NVRTC and the kernel cache.
 * Opened once (the primary context is per device and per process anyway) and kept until `closeCuda`.
 */
import { CudaDriver } from "./driver.ts";
import { KernelCache } from "./kernel_cache.ts";
import type { DiscoverOptions } from "./libs.ts";
import { Nvrtc } from "./nvrtc.ts";

export interface CudaContext {
  readonly driver: CudaDriver;
  readonly nvrtc: Nvrtc;
  readonly cache: KernelCache;
  /** "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, driver 13.0, NVRTC 13.0)" for logs and benchmark records. */
  readonly description: string;
}

let shared: CudaContext | undefined;

/**
 * Opens (once) the driver on device 0, NVRTC and the kernel cache. Throws CudaUnavailableError when a
 * library or the GPU is missing; the message names what was searched.
 */
export function openCuda(opts: DiscoverOptions & { cacheDir?: string } = {}): CudaContext {
  if (shared) return shared;
  const driver = CudaDriver.open(0, opts);
  let nvrtc: Nvrtc;
  try {
    nvrtc = Nvrtc.open(opts);
  } catch (e) {
    driver.close();
    throw e;
  }
  const { name, capability, smCount, driverVersion } = driver.info;
  const description = `${name} (sm_${capability.join("")}, ${smCount} SMs, driver ${
    Math.floor(driverVersion / 1000)
  }.${(driverVersion % 1000) / 10}, NVRTC ${nvrtc.versionString})`;
  shared = { driver, nvrtc, cache: new KernelCache(opts.cacheDir), description };
  return shared;
}

export function closeCuda(): void {
  if (!shared) return;
  shared.nvrtc.close();
  shared.driver.close();
  shared = undefined;
}
