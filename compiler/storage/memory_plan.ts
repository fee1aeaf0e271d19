/**
 * Memory planning: liveness-based reuse of buffers across the steps of a schedule. Pinned buffers get a
 * slot of their own; an unpinned buffer is live from its first write to its last access, and two share a
 * slot only when their live ranges are disjoint (WebGPU forbids a writable binding aliasing another in one
 * dispatch). Best-fit placement in order of first write, independent of the `buffers` order (DESIGN.md,
 * notes: compiler/storage/memory_plan.ts).
 */

/** Slot sizes are multiples of this: WebGPU wants buffer sizes in multiples of 4, and 16 keeps a vec4 load
 * at the end of a slot in bounds. */
export const ALIGN = 16;

export interface BufferSpec {
  readonly id: number;
  readonly bytes: number;
  /** Gets a slot of its own, live for the whole schedule. */
  readonly pinned: boolean;
}

export interface Step {
  readonly reads: readonly number[];
  readonly writes: readonly number[];
}

export interface Slot {
  /** Index into `slots`. */
  readonly id: number;
  /** The largest of its buffers, rounded up to a multiple of ALIGN. */
  readonly bytes: number;
  readonly pinned: boolean;
  /** Buffer ids placed in this slot, in order of their live ranges. */
  readonly buffers: readonly number[];
}

export interface LiveRange {
  /** First step that writes the buffer. */
  readonly first: number;
  /** Last step that reads or writes it. */
  readonly last: number;
}

export interface MemoryPlan {
  /** Buffer id -> slot id. */
  readonly slotOf: Map<number, number>;
  readonly slots: readonly Slot[];
  /** Live range of every unpinned buffer the schedule touches. */
  readonly liveRanges: ReadonlyMap<number, LiveRange>;
  /** Sum of slot sizes. */
  readonly bytesWithReuse: number;
  /** Sum of the buffers' sizes, each rounded up to ALIGN as a slot of its own would be. */
  readonly bytesWithoutReuse: number;
  /** The most bytes live at any one step (pinned buffers count everywhere): a lower bound for any plan. */
  readonly peakLiveBytes: number;
}

export class MemoryPlanError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MemoryPlanError";
  }
}

export const alignUp = (bytes: number) => Math.ceil(bytes / ALIGN) * ALIGN;

function liveRangesOf(
  byId: ReadonlyMap<number, BufferSpec>,
  schedule: readonly Step[],
): Map<number, LiveRange> {
  const firstWrite = new Map<number, number>(), firstRead = new Map<number, number>();
  const last = new Map<number, number>();
  schedule.forEach((step, s) => {
    for (const [kind, ids] of [["reads", step.reads], ["writes", step.writes]] as const) {
      for (const id of ids) {
        if (!byId.has(id)) {
          throw new MemoryPlanError(`step ${s} ${kind} buffer ${id}, which is not in the list`);
        }
        const first = kind === "reads" ? firstRead : firstWrite;
        if (!first.has(id)) first.set(id, s);
        last.set(id, s);
      }
    }
  });
  const ranges = new Map<number, LiveRange>();
  for (const [id, spec] of byId) {
    if (spec.pinned || !last.has(id)) continue;
    const w = firstWrite.get(id), r = firstRead.get(id);
    // A step may read what it first writes (a read_write binding the kernel initializes itself); a read
    // at an earlier step would see whatever the slot's previous tenant left there.
    if (r !== undefined && (w === undefined || r < w)) {
      throw new MemoryPlanError(
        `buffer ${id} is read at step ${r} ${
          w === undefined ? "but never written" : `but first written at step ${w}`
        } (only pinned buffers may hold values from outside the schedule)`,
      );
    }
    ranges.set(id, { first: w!, last: last.get(id)! });
  }
  return ranges;
}

export function planMemory(buffers: readonly BufferSpec[], schedule: readonly Step[]): MemoryPlan {
  const byId = new Map<number, BufferSpec>();
  for (const b of [...buffers].sort((x, y) => x.id - y.id)) {
    if (!Number.isInteger(b.id)) throw new MemoryPlanError(`buffer id ${b.id} is not an integer`);
    if (byId.has(b.id)) throw new MemoryPlanError(`buffer ${b.id} is listed twice`);
    if (!(Number.isSafeInteger(b.bytes) && b.bytes >= 0)) {
      throw new MemoryPlanError(`buffer ${b.id} has size ${b.bytes}, not a non-negative integer`);
    }
    byId.set(b.id, b);
  }
  const ranges = liveRangesOf(byId, schedule);

  interface OpenSlot {
    id: number;
    bytes: number;
    pinned: boolean;
    buffers: number[];
    /** Last step of the live range of the slot's latest buffer. */
    end: number;
  }
  const slots: OpenSlot[] = [];
  const slotOf = new Map<number, number>();
  const open = (b: BufferSpec, end: number): void => {
    slotOf.set(b.id, slots.length);
    slots.push({ id: slots.length, bytes: alignUp(b.bytes), pinned: b.pinned, buffers: [b.id], end });
  };

  for (const b of byId.values()) if (b.pinned) open(b, Infinity);

  // Buffers the schedule never touches are live nowhere: they go last and may join any slot.
  const order = [...byId.values()].filter((b) => !b.pinned).sort((x, y) => {
    const rx = ranges.get(x.id)?.first ?? Infinity, ry = ranges.get(y.id)?.first ?? Infinity;
    return rx - ry || x.id - y.id;
  });
  for (const b of order) {
    const range = ranges.get(b.id);
    const start = range?.first ?? Infinity, end = range?.last ?? -Infinity;
    const need = alignUp(b.bytes);
    let best: OpenSlot | undefined, biggest: OpenSlot | undefined;
    for (const s of slots) {
      if (s.pinned || !(s.end < start)) continue;
      if (s.bytes >= need && (!best || s.bytes < best.bytes)) best = s;
      if (!biggest || s.bytes > biggest.bytes) biggest = s;
    }
    const slot = best ?? biggest;
    if (!slot) {
      open(b, end);
      continue;
    }
    slot.bytes = Math.max(slot.bytes, need);
    slot.buffers.push(b.id);
    slot.end = Math.max(slot.end, end);
    slotOf.set(b.id, slot.id);
  }

  const pinnedBytes = [...byId.values()].filter((b) => b.pinned).reduce((a, b) => a + alignUp(b.bytes), 0);
  // Difference array over steps: + at the first step of a range, - after its last.
  const delta = new Float64Array(schedule.length + 1);
  for (const [id, r] of ranges) {
    const bytes = alignUp(byId.get(id)!.bytes);
    delta[r.first] += bytes;
    delta[r.last + 1] -= bytes;
  }
  let live = pinnedBytes, peakLiveBytes = pinnedBytes;
  for (let s = 0; s < schedule.length; s++) {
    live += delta[s];
    peakLiveBytes = Math.max(peakLiveBytes, live);
  }

  return {
    slotOf,
    slots: slots.map(({ id, bytes, pinned, buffers }) => ({ id, bytes, pinned, buffers })),
    liveRanges: ranges,
    bytesWithReuse: slots.reduce((a, s) => a + s.bytes, 0),
    bytesWithoutReuse: [...byId.values()].reduce((a, b) => a + alignUp(b.bytes), 0),
    peakLiveBytes,
  };
}
