/**
 * Host <-> GPU data: converting JavaScript numbers to a buffer's stored form and back, and reading buffers
 * through a mappable staging buffer. Stored forms (see plan/plan.ts `storedBytes`): f32, i32, u32 as
 * themselves, f16 as IEEE half (Float16Array), bool as u32 0/1. bf16 has no WGSL form.
 */
import { numel } from "../../ir/dtype.ts";
import { type PlanBuffer, type PlanDType, storedBytes } from "../../plan/plan.ts";
import { WebGPUError } from "./webgpu_errors.ts";

export type HostArray = Float32Array | Int32Array | Uint32Array;

/** Copy and binding sizes must be multiples of 4 bytes. */
export const round4 = (n: number) => Math.ceil(n / 4) * 4;

function noBF16(b: PlanBuffer): never {
  throw new WebGPUError(`buffer '${b.name}' is bf16: bf16 needs the CUDA backend`);
}

/** `data` in the stored form of `b`, padded with zeros to a multiple of 4 bytes. */
export function encodeHost(b: PlanBuffer, data: ArrayLike<number>): Uint8Array<ArrayBuffer> {
  const n = numel(b.shape);
  if (data.length !== n) {
    throw new WebGPUError(
      `buffer '${b.name}' has ${n} elements (shape [${b.shape.join(", ")}]), got ${data.length} values`,
    );
  }
  const out = new Uint8Array(round4(n * storedBytes(b.dtype)));
  const view = (ctor: typeof Float32Array | typeof Int32Array | typeof Uint32Array | typeof Float16Array) =>
    new ctor(out.buffer, 0, n);
  switch (b.dtype) {
    case "f32":
      view(Float32Array).set(data);
      break;
    case "f16":
      view(Float16Array).set(data);
      break;
    case "i32":
      view(Int32Array).set(data);
      break;
    case "u32":
      view(Uint32Array).set(data);
      break;
    case "bool": {
      const u = view(Uint32Array);
      for (let i = 0; i < n; i++) u[i] = data[i] ? 1 : 0;
      break;
    }
    case "bf16":
      noBF16(b);
  }
  return out;
}

/** The host array for `bytes` holding `b` in stored form: f32 for floats (f16 decoded), else i32/u32. */
export function decodeHost(b: PlanBuffer, bytes: ArrayBuffer): HostArray {
  const n = numel(b.shape);
  const kinds: Record<PlanDType, () => HostArray> = {
    f32: () => new Float32Array(bytes, 0, n).slice(),
    f16: () => Float32Array.from(new Float16Array(bytes, 0, n)),
    i32: () => new Int32Array(bytes, 0, n).slice(),
    u32: () => new Uint32Array(bytes, 0, n).slice(),
    bool: () => new Uint32Array(bytes, 0, n).slice(),
    bf16: () => noBF16(b),
  };
  return kinds[b.dtype]();
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
