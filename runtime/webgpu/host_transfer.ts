/**
 * Host <-> GPU data: values in a buffer's stored form (runtime/host.ts, as every runtime stores them) padded
 * to WebGPU's 4-byte copies, and buffers read through a mappable staging buffer. bf16 has no WGSL form.
 */
import { type PlanBuffer, storedSize } from "../../plan/plan.ts";
import { decodeStored, encodeStored, type HostArray } from "../host.ts";
import { WebGPUError } from "./webgpu_errors.ts";

/** Copy and binding sizes must be multiples of 4 bytes. */
export const round4 = (n: number) => Math.ceil(n / 4) * 4;

function noBF16(b: PlanBuffer): void {
  if (b.dtype === "bf16") throw new WebGPUError(`buffer '${b.name}' is bf16: bf16 needs the CUDA backend`);
}

/** `data` in the stored form of `b` (runtime/host.ts), padded with zeros to a multiple of 4 bytes. */
export function encodeHost(b: PlanBuffer, data: ArrayLike<number>): Uint8Array<ArrayBuffer> {
  noBF16(b);
  return encodeStored(b, data, new Uint8Array(round4(storedSize(b))));
}

/** The host array for `bytes` holding `b` in stored form: f32 for floats (f16 decoded), else i32/u32. */
export function decodeHost(b: PlanBuffer, bytes: ArrayBuffer): HostArray {
  noBF16(b);
  return decodeStored(b, new Uint8Array(bytes, 0, storedSize(b)));
}

/**
 * Reads several GPU byte ranges with one submission: each range is copied into its own part of one
 * staging buffer, which is mapped once.
 */
export async function readRanges(
  device: GPUDevice,
  ranges: readonly { buffer: GPUBuffer; offset?: number; size: number }[],
): Promise<ArrayBuffer[]> {
  const offsets: number[] = [];
  let total = 0;
  for (const r of ranges) {
    offsets.push(total);
    total += round4(r.size);
  }
  const staging = device.createBuffer({
    label: "readback",
    size: Math.max(4, total),
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  try {
    const enc = device.createCommandEncoder({ label: "readback" });
    ranges.forEach((r, i) => {
      if (r.size > 0) enc.copyBufferToBuffer(r.buffer, r.offset ?? 0, staging, offsets[i], round4(r.size));
    });
    device.queue.submit([enc.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const all = staging.getMappedRange();
    const out = ranges.map((r, i) => all.slice(offsets[i], offsets[i] + round4(r.size)));
    staging.unmap();
    return out;
  } finally {
    staging.destroy();
  }
}
