/**
 * Buffers larger than one binding may hold. WebGPU limits the bytes one storage binding sees
 * (maxStorageBufferBindingSize: 128 MiB on lavapipe and in many browsers) far below what one buffer may
 * hold (maxBufferSize: 2 GiB on lavapipe). A buffer over the binding limit is therefore bound as
 * consecutive ranges of one buffer, each at its own binding, and the kernel picks the range an index
 * falls in. The compiler (which declares the ranges), fusion (which counts bindings) and the WebGPU
 * runtime (which binds them) all follow the rule written here, so they cannot disagree.
 */
import { PLAN_OFFSET_ALIGN } from "./plan.ts";

/**
 * Bytes of every range but the last for a binding limit of `limitBytes`: the largest multiple of
 * PLAN_OFFSET_ALIGN within the limit, so every range starts at an offset any adapter accepts
 * (minStorageBufferOffsetAlignment is at most 256) and holds whole four-lane vectors.
 */
export function rangeBytes(limitBytes: number): number {
  const bytes = Math.floor(limitBytes / PLAN_OFFSET_ALIGN) * PLAN_OFFSET_ALIGN;
  if (!(bytes > 0)) {
    throw new RangeError(
      `a binding limit of ${limitBytes} bytes is below the ${PLAN_OFFSET_ALIGN}-byte alignment`,
    );
  }
  return bytes;
}

/** How many bindings a buffer of `bytes` takes under `limitBytes` (no limit: one). */
export function rangeCount(bytes: number, limitBytes: number | undefined): number {
  return limitBytes === undefined || bytes <= limitBytes ? 1 : Math.ceil(bytes / rangeBytes(limitBytes));
}

/** A binding as far as its ranges go: its elements, and the elements per range when it is split. */
export interface RangedBinding {
  readonly elements: number;
  /** Elements in every range but the last; absent when the buffer is bound whole. */
  readonly rangeElements?: number;
}

/** The number of ranges of one binding. */
export function rangesOf(b: RangedBinding): number {
  return b.rangeElements === undefined ? 1 : Math.ceil(b.elements / b.rangeElements);
}

/**
 * The first WGSL @binding number of each binding, in order: a split binding takes as many consecutive
 * numbers as it has ranges.
 */
export function firstBindingNumbers(bindings: readonly RangedBinding[]): number[] {
  let next = 0;
  return bindings.map((b) => {
    const first = next;
    next += rangesOf(b);
    return first;
  });
}
