/**
 * Host values <-> a buffer's stored bytes, for every runtime: f32, i32, u32 as themselves, f16 and bf16 as
 * 2-byte bit patterns (rounded to nearest even), bool as a 4-byte u32 0/1 (the kernel ABI's bool). WGSL
 * lacks bf16 (the WebGPU runtime refuses it).
 */
import { numel } from "../ir/dtype.ts";
import { decodeBF16, encodeBF16 } from "../numeric/half.ts";
import { type PlanBuffer, storedSize } from "../plan/plan.ts";
import { PlanBufferError } from "./plan_buffer_error.ts";

export type HostArray = Float32Array | Int32Array | Uint32Array;

/**
 * `data` in the stored form of `b` (exactly storedSize(b) bytes), written into `out` when it is given (a
 * buffer's own bytes, 4-byte aligned: the CPU executor's arena), else into fresh bytes.
 */
export function encodeStored(
  b: PlanBuffer,
  data: ArrayLike<number>,
  out: Uint8Array<ArrayBuffer> = new Uint8Array(storedSize(b)),
): Uint8Array<ArrayBuffer> {
  const n = numel(b.shape);
  if (data.length !== n) {
    throw new PlanBufferError(
      `buffer '${b.name}' has ${n} elements (shape [${b.shape.join(", ")}]), got ${data.length} values`,
    );
  }
  const view = <T>(C: new (buf: ArrayBuffer, at: number, n: number) => T) =>
    new C(out.buffer, out.byteOffset, n);
  switch (b.dtype) {
    case "f32":
      view(Float32Array).set(data);
      break;
    case "f16":
      view(Float16Array).set(data);
      break;
    case "bf16":
      view(Uint16Array).set(encodeBF16(data));
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
  }
  return out;
}

/** Stored bytes back to host values: Float32Array for floats, Int32Array for i32, Uint32Array else. */
export function decodeStored(b: PlanBuffer, bytes: Uint8Array<ArrayBuffer>): HostArray {
  const n = numel(b.shape);
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  switch (b.dtype) {
    case "f32":
      return new Float32Array(buf, 0, n);
    case "f16":
      return Float32Array.from(new Float16Array(buf, 0, n));
    case "bf16":
      return decodeBF16(new Uint16Array(buf, 0, n), new Float32Array(n));
    case "i32":
      return new Int32Array(buf, 0, n);
    case "u32":
    case "bool":
      return new Uint32Array(buf, 0, n);
  }
}
