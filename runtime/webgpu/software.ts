/** Telling a software WebGPU adapter from a GPU (engine/backends.ts, web/webgpu_runner.ts). */
import type { GpuContext } from "./device.ts";

/**
 * Why an adapter is a software rasterizer (Mesa's lavapipe/llvmpipe, SwiftShader, WARP, or the adapter's
 * own fallback flag): on such an adapter the CPU backend runs the same kernels several times faster, so
 * `auto` passes it over; `--backend webgpu` still uses it.
 */
export function softwareAdapter(
  ctx: Pick<GpuContext, "description"> & { adapter?: GPUAdapter },
): string | undefined {
  const info = ctx.adapter?.info as (GPUAdapterInfo & { isFallbackAdapter?: boolean }) | undefined;
  const text = [ctx.description, info?.vendor, info?.architecture, info?.device].filter(Boolean).join(" ");
  if (
    info?.isFallbackAdapter || /llvmpipe|lavapipe|swiftshader|softpipe|microsoft basic render/i.test(text)
  ) {
    return `adapter '${ctx.description}' is a software rasterizer`;
  }
  return undefined;
}
