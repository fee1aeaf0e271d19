/**
 * Memory planning: buffers with disjoint lifetimes share a slot (memory_plan.ts). A part of an in-place
 * flat vector lives in the vector's buffer at its offset: the planner sees only the vector (pinned: never
 * shared, so the ranges no part covers keep reading as zero), and so does an output that views a part
 * (output_views.ts). An update written in place lives where the buffer it updates does.
 */
import { storedBytes, storedSize } from "../../plan/plan.ts";
import { planMemory } from "../storage/memory_plan.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import { type KernelState, need } from "./state.ts";

const NAME = "memory-plan";

export const memoryStage: Stage<KernelState> = {
  name: NAME,
  about:
    "buffers with disjoint lifetimes share a slot; parts of an in-place flat vector sit at their offsets",
  run: (s) => {
    const fusion = need(s.fusion, "the fusion", NAME);
    const buffers = need(s.buffers, "buffers", NAME);
    const bufferOfNode = need(s.bufferOfNode, "buffers", NAME);
    const schedule = need(s.schedule, "the schedule", NAME);
    const container = new Map<number, { buffer: number; offset: number }>();
    for (const [id, where] of fusion.inPlace.placed) {
      const part = bufferOfNode.get(id);
      if (part === undefined) throw new Error(`internal: placed %${id} has no buffer`);
      const whole = bufferOfNode.get(where.concat)!;
      container.set(part, { buffer: whole, offset: where.elementOffset * storedBytes(buffers[whole].dtype) });
    }
    // An output viewing a part of a flat vector (output_views.ts) lives where the part does.
    for (const [view, viewed] of s.viewOf ?? []) {
      const at = container.get(viewed);
      if (!at) {
        throw new Error(`internal: output buffer ${view} views buffer ${viewed}, which no flat vector holds`);
      }
      container.set(view, at);
    }
    // An update written over what it updates (in_place_updates.ts) lives where its target does.
    for (const [value, target] of s.aliasOf ?? []) {
      container.set(value, container.get(target) ?? { buffer: target, offset: 0 });
    }
    const inSlotOf = (id: number) => container.get(id)?.buffer ?? id;
    const pinnedVector = new Set([...fusion.inPlace.concats].map((c) => bufferOfNode.get(c)!));
    const mem = planMemory(
      buffers.filter((b) => !container.has(b.id)).map((b) => ({
        id: b.id,
        bytes: storedSize(b),
        pinned: b.role !== "activation" || pinnedVector.has(b.id),
      })),
      schedule.access.map((a) => ({ reads: a.reads.map(inSlotOf), writes: a.writes.map(inSlotOf) })),
    );
    const slotOf = new Map<number, number>();
    const offsetOf = new Map<number, number>();
    for (const b of buffers) {
      const slot = mem.slotOf.get(inSlotOf(b.id));
      if (slot === undefined) throw new Error(`internal: buffer ${b.id} has no slot`);
      slotOf.set(b.id, slot);
      const offset = container.get(b.id)?.offset ?? 0;
      if (offset) offsetOf.set(b.id, offset);
    }
    return {
      ...s,
      memory: {
        slotOf,
        offsetOf,
        slots: mem.slots.map((x) => ({ id: x.id, bytes: x.bytes })),
        bytesWithReuse: mem.bytesWithReuse,
        bytesWithoutReuse: mem.bytesWithoutReuse,
        peakLiveBytes: mem.peakLiveBytes,
      },
    };
  },
};
