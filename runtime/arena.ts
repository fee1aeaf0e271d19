/**
 * Where every slot and buffer of a Plan lives in a runtime's one allocation (the arena: the CUDA runtime's
 * device memory, the CPU backend's host memory). One allocation instead of one per slot: cuMemAlloc is slow and each call pads to its own granularity,
 * and a single base address makes every buffer address a plain sum. Slots are placed in slot order at
 * ARENA_ALIGN-byte boundaries (256: cuBLASLt's default alignment requirement, and what cuMemAlloc itself
 * guarantees), so every buffer start is 256-byte aligned (plan offsets are multiples of
 * PLAN_OFFSET_ALIGN, also 256). A pure function of the plan, so it is tested without a GPU.
 */
import { type Plan, PLAN_OFFSET_ALIGN, storedSize } from "../plan/plan.ts";
import { PlanBufferError } from "./plan_buffer_error.ts";

export const ARENA_ALIGN = 256;

export interface ArenaOffsets {
  /** Byte offset of each slot from the arena base (index = slot id). */
  readonly slotOffsets: readonly number[];
  /** Bytes reserved for each slot (before rounding up to the next slot's alignment). */
  readonly slotBytes: readonly number[];
  /** Byte offset of each buffer from the arena base: its slot's offset plus its own offset in the slot. */
  readonly bufferOffsets: readonly number[];
  /** Bytes to allocate. */
  readonly totalBytes: number;
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

export function arenaOffsets(plan: Pick<Plan, "graph" | "buffers" | "slots">): ArenaOffsets {
  // A slot must hold the plan's size for it and every buffer it hosts at that buffer's offset, stored as
  // this runtime stores it (bool as 4 bytes: the plan's `bytes` counts it as 1).
  const slotBytes = plan.slots.map((s, i) => {
    if (s.id !== i) throw new PlanBufferError(`plan ${plan.graph}: slot at index ${i} has id ${s.id}`);
    return s.bytes;
  });
  for (const b of plan.buffers) {
    if (!Number.isInteger(b.slot) || b.slot < 0 || b.slot >= plan.slots.length) {
      throw new PlanBufferError(
        `plan ${plan.graph}: buffer '${b.name}' is in slot ${b.slot}, which the plan lacks`,
      );
    }
    const offset = b.offset ?? 0;
    if (!Number.isInteger(offset) || offset < 0 || offset % PLAN_OFFSET_ALIGN !== 0) {
      throw new PlanBufferError(
        `plan ${plan.graph}: buffer '${b.name}' sits at offset ${offset} in slot ${b.slot}, not a ` +
          `non-negative multiple of ${PLAN_OFFSET_ALIGN}`,
      );
    }
    slotBytes[b.slot] = Math.max(slotBytes[b.slot], offset + storedSize(b));
  }
  const slotOffsets: number[] = [];
  let total = 0;
  for (const bytes of slotBytes) {
    slotOffsets.push(total);
    // At least one alignment unit, so that distinct slots never share an address.
    total += alignUp(Math.max(bytes, 1), ARENA_ALIGN);
  }
  const bufferOffsets = plan.buffers.map((b) => slotOffsets[b.slot] + (b.offset ?? 0));
  return { slotOffsets, slotBytes, bufferOffsets, totalBytes: Math.max(total, ARENA_ALIGN) };
}

/** Bytes of the arena that the plan reads as zero and that a step may overwrite. */
export interface ZeroRegion {
  /** Byte offset from the arena base. */
  readonly offset: number;
  readonly bytes: number;
  /** The buffer whose padding this is, for messages. */
  readonly buffer: string;
}

/**
 * The padding of in-place flat vectors (compiler/fusion/in_place.ts) that a run may dirty. A flat vector's
 * parts sit inside it at offsets; the ranges no part covers are zero fills that nothing computes: the plan
 * reads them as zero because the vector's slot is never shared and the arena starts zeroed. That holds
 * for one run only when a step writes the whole vector: the parameter update copies the optimizer's new
 * flat vector, padding included, over the old one, and whether its padding came out zero depends on the
 * optimizer's arithmetic (0/0 is NaN). So for each vector that a kernel writes, a copy step targets or an
 * update replaces, its gaps are returned, and the executor zeroes them at the start of every run.
 * A vector is the largest buffer at offset 0 of a slot that also hosts buffers at non-zero offsets.
 */
export function zeroRegions(
  plan: Pick<Plan, "buffers" | "kernels" | "steps" | "updates">,
  layout: ArenaOffsets,
): ZeroRegion[] {
  const written = new Set<number>();
  for (const k of plan.kernels) for (const b of k.bindings) if (b.access !== "read") written.add(b.buffer);
  for (const s of plan.steps) if (s.op === "copy") written.add(s.dst);
  for (const u of plan.updates) written.add(u.param);
  const out: ZeroRegion[] = [];
  const slots = new Set(plan.buffers.filter((b) => (b.offset ?? 0) > 0).map((b) => b.slot));
  for (const slot of [...slots].sort((a, b) => a - b)) {
    const inSlot = plan.buffers.filter((b) => b.slot === slot);
    const vector = inSlot.filter((b) => !b.offset).sort((a, b) => storedSize(b) - storedSize(a))[0];
    if (!vector || !written.has(vector.id)) continue;
    const parts = inSlot.filter((b) => b !== vector).map((
      b,
    ) => [b.offset ?? 0, (b.offset ?? 0) + storedSize(b)])
      .sort((a, b) => a[0] - b[0]);
    const base = layout.bufferOffsets[vector.id];
    let at = 0;
    const end = storedSize(vector);
    for (const [from, to] of [...parts, [end, end]]) {
      if (from > at) out.push({ offset: base + at, bytes: Math.min(from, end) - at, buffer: vector.name });
      at = Math.max(at, to);
      if (at >= end) break;
    }
  }
  return out;
}
