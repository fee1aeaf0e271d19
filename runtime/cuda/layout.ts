/**
 * Where every slot and buffer of a Plan lives in the CUDA runtime's one device allocation (the arena).
 * One allocation instead of one per slot: cuMemAlloc is slow and each call pads to its own granularity,
 * and a single base address makes every buffer address a plain sum. Slots are placed in slot order at
 * ARENA_ALIGN-byte boundaries (256: cuBLASLt's default alignment requirement, and what cuMemAlloc itself
 * guarantees), so every buffer start is 256-byte aligned (plan offsets are multiples of
 * PLAN_OFFSET_ALIGN, also 256). A pure function of the plan, so it is tested without a GPU.
 */
import { type Plan, PLAN_OFFSET_ALIGN, storedSize } from "../../plan/plan.ts";
import { CudaError } from "./errors.ts";

export const ARENA_ALIGN = 256;

export interface ArenaLayout {
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

export function arenaLayout(plan: Pick<Plan, "graph" | "buffers" | "slots">): ArenaLayout {
  // A slot must hold the plan's size for it and every buffer it hosts at that buffer's offset, stored as
  // this runtime stores it (bool as 4 bytes: the plan's `bytes` counts it as 1).
  const slotBytes = plan.slots.map((s, i) => {
    if (s.id !== i) throw new CudaError(`plan ${plan.graph}: slot at index ${i} has id ${s.id}`);
    return s.bytes;
  });
  for (const b of plan.buffers) {
    if (!Number.isInteger(b.slot) || b.slot < 0 || b.slot >= plan.slots.length) {
      throw new CudaError(
        `plan ${plan.graph}: buffer '${b.name}' is in slot ${b.slot}, which the plan lacks`,
      );
    }
    const offset = b.offset ?? 0;
    if (!Number.isInteger(offset) || offset < 0 || offset % PLAN_OFFSET_ALIGN !== 0) {
      throw new CudaError(
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
