/**
 * The memory plan: reuse along a chain, best fit, growth, pinned buffers, the errors, and a brute-force
 * check on random schedules that no step ever sees two of its buffers in one slot and that every read
 * finds the value its buffer was given (simulating the slots), with sizes respected and the plan
 * independent of the order buffers are listed in.
 */
import assert from "node:assert/strict";
import {
  ALIGN,
  alignUp,
  type BufferSpec,
  MemoryPlanError,
  planMemory,
  type Step,
} from "../../compiler/storage/memory_plan.ts";
import { type Rng, seededRandom } from "../../cases/random.ts";

const buf = (id: number, bytes: number, pinned = false): BufferSpec => ({ id, bytes, pinned });
const step = (reads: number[], writes: number[]): Step => ({ reads, writes });

Deno.test("memory plan: a chain reuses every other buffer's slot", () => {
  // input 0 -> 1 -> 2 -> 3 -> 4 -> output 5
  const buffers = [buf(0, 100, true), buf(1, 400), buf(2, 400), buf(3, 400), buf(4, 400), buf(5, 100, true)];
  const schedule = [step([0], [1]), step([1], [2]), step([2], [3]), step([3], [4]), step([4], [5])];
  const plan = planMemory(buffers, schedule);
  assert.deepEqual(plan.liveRanges.get(1), { first: 0, last: 1 });
  assert.deepEqual(plan.liveRanges.get(4), { first: 3, last: 4 });
  assert.equal(plan.slotOf.get(1), plan.slotOf.get(3));
  assert.equal(plan.slotOf.get(2), plan.slotOf.get(4));
  assert.notEqual(plan.slotOf.get(1), plan.slotOf.get(2));
  assert.equal(plan.slots.length, 4);
  assert.deepEqual(plan.slots.map((s) => [s.bytes, s.pinned, s.buffers]), [
    [112, true, [0]],
    [112, true, [5]],
    [400, false, [1, 3]],
    [400, false, [2, 4]],
  ]);
  assert.equal(plan.bytesWithReuse, 112 * 2 + 800);
  assert.equal(plan.bytesWithoutReuse, 112 * 2 + 1600);
  assert.equal(plan.peakLiveBytes, 112 * 2 + 800);
});

Deno.test("memory plan: a buffer takes the tightest free slot, or grows the biggest free one", () => {
  // 1 (64 B) and 2 (256 B) die at step 1; 3 (48 B) should take 1's slot, 4 (300 B) should grow 2's.
  const buffers = [buf(1, 64), buf(2, 256), buf(3, 48), buf(4, 300), buf(5, 16, true)];
  const schedule = [step([], [1, 2]), step([1, 2], [5]), step([], [3, 4]), step([3, 4], [5])];
  const plan = planMemory(buffers, schedule);
  assert.equal(plan.slotOf.get(3), plan.slotOf.get(1));
  assert.equal(plan.slotOf.get(4), plan.slotOf.get(2));
  assert.equal(plan.slots[plan.slotOf.get(4)!].bytes, 304);
  assert.equal(plan.slots[plan.slotOf.get(3)!].bytes, 64);
  assert.equal(plan.bytesWithReuse, 16 + 64 + 304);
});

Deno.test("memory plan: buffers of one step never share; a write-only buffer is live at its step", () => {
  // 1 is written and never read; 2 is written at the same step; 3 is written at the next step.
  const plan = planMemory([buf(1, 32), buf(2, 32), buf(3, 32)], [step([], [1, 2]), step([2], [3])]);
  assert.deepEqual(plan.liveRanges.get(1), { first: 0, last: 0 });
  assert.notEqual(plan.slotOf.get(1), plan.slotOf.get(2));
  assert.equal(plan.slotOf.get(3), plan.slotOf.get(1), "1 is dead after step 0, so 3 may take its slot");
  // Read and written by one step (in place): still one live range, no sharing with a peer of that step.
  const inPlace = planMemory([buf(1, 32), buf(2, 32)], [step([], [1]), step([1], [1, 2])]);
  assert.deepEqual(inPlace.liveRanges.get(1), { first: 0, last: 1 });
  assert.notEqual(inPlace.slotOf.get(1), inPlace.slotOf.get(2));
});

Deno.test("memory plan: pinned buffers get their own slots, even when idle", () => {
  const plan = planMemory(
    [buf(7, 10, true), buf(8, 10, true), buf(9, 10), buf(10, 10)],
    [step([7], [9]), step([9], [10]), step([10], [8])],
  );
  const pinnedSlots = [plan.slotOf.get(7), plan.slotOf.get(8)];
  assert.notEqual(pinnedSlots[0], pinnedSlots[1]);
  for (const s of plan.slots) if (s.pinned) assert.equal(s.buffers.length, 1);
  assert.ok(![9, 10].some((b) => pinnedSlots.includes(plan.slotOf.get(b))));
  const idle = planMemory([buf(1, 8, true), buf(2, 8)], []);
  assert.equal(idle.slots.length, 2);
  assert.equal(idle.peakLiveBytes, 16);
});

Deno.test("memory plan: errors name the buffer and the step", () => {
  assert.throws(
    () => planMemory([buf(1, 8), buf(2, 8)], [step([1], [2]), step([], [1])]),
    (e: Error) =>
      e instanceof MemoryPlanError &&
      /buffer 1 is read at step 0 but first written at step 1/.test(e.message),
  );
  assert.throws(
    () => planMemory([buf(1, 8), buf(2, 8)], [step([1], [2])]),
    /buffer 1 is read at step 0 but never written/,
  );
  // A step that reads what it first writes (a read_write binding it initializes) is fine.
  assert.deepEqual(planMemory([buf(1, 8)], [step([1], [1])]).liveRanges.get(1), { first: 0, last: 0 });
  assert.throws(
    () => planMemory([buf(1, 8)], [step([], [1]), step([3], [])]),
    /step 1 reads buffer 3, which is not/,
  );
  assert.throws(() => planMemory([buf(1, 8), buf(1, 8)], []), /buffer 1 is listed twice/);
  assert.throws(() => planMemory([buf(1, -8)], []), /buffer 1 has size -8/);
  // Pinned buffers may be read first: they hold inputs and parameters.
  planMemory([buf(1, 8, true), buf(2, 8)], [step([1], [2]), step([2], [1])]);
});

// ---- brute force on random schedules ------------------------------------------------------------------

function randomCase(r: Rng) {
  const n = r.int(2, 40);
  const buffers: BufferSpec[] = [];
  for (let id = 0; id < n; id++) buffers.push(buf(id * 3 + 1, r.int(0, 5000), r.uniform() < 0.2));
  const written = new Set(buffers.filter((b) => b.pinned).map((b) => b.id));
  const schedule: Step[] = [];
  const steps = r.int(1, 60);
  for (let s = 0; s < steps; s++) {
    const pool = [...written];
    const reads = pool.length
      ? [...new Set(Array.from({ length: r.int(0, 4) }, () => pool[r.int(0, pool.length)]))]
      : [];
    const writes = [...new Set(Array.from({ length: r.int(1, 3) }, () => buffers[r.int(0, n)].id))];
    schedule.push(step(reads, writes));
    for (const w of writes) written.add(w);
  }
  return { buffers, schedule };
}

/** Independent liveness: the set of unpinned buffers live at each step, by definition. */
function liveAt(buffers: readonly BufferSpec[], schedule: readonly Step[]): Set<number>[] {
  const live = schedule.map(() => new Set<number>());
  for (const b of buffers) {
    if (b.pinned) continue;
    const touches = schedule.flatMap((
      st,
      s,
    ) => (st.reads.includes(b.id) || st.writes.includes(b.id) ? [s] : []));
    const firstWrite = schedule.findIndex((st) => st.writes.includes(b.id));
    if (firstWrite < 0) continue;
    for (let s = firstWrite; s <= Math.max(...touches); s++) live[s].add(b.id);
  }
  return live;
}

Deno.test("memory plan: random schedules never alias live buffers, and every read finds its value", () => {
  const r = seededRandom(4242);
  let reusedBytes = 0, totalBytes = 0;
  for (let c = 0; c < 400; c++) {
    const { buffers, schedule } = randomCase(r);
    const plan = planMemory(buffers, schedule);
    // Every buffer has a slot that holds it; pinned slots hold one buffer.
    for (const b of buffers) {
      const slot = plan.slots[plan.slotOf.get(b.id)!];
      assert.ok(slot.buffers.includes(b.id));
      assert.ok(slot.bytes >= b.bytes && slot.bytes % ALIGN === 0);
      if (b.pinned) assert.deepEqual(slot.buffers, [b.id]);
    }
    assert.equal(plan.slots.reduce((a, s) => a + s.buffers.length, 0), buffers.length);
    // Buffers live at the same step are in different slots (pairwise, by brute force).
    for (const [s, live] of liveAt(buffers, schedule).entries()) {
      const all = [...live, ...buffers.filter((b) => b.pinned).map((b) => b.id)];
      const slots = all.map((id) => plan.slotOf.get(id)!);
      assert.equal(new Set(slots).size, slots.length, `case ${c} step ${s}: two live buffers share a slot`);
    }
    // Simulate: each slot remembers which buffer last wrote it; a read must find its own buffer there.
    const holder = new Map<number, number>();
    for (const b of buffers) if (b.pinned) holder.set(plan.slotOf.get(b.id)!, b.id);
    schedule.forEach((st, s) => {
      for (const id of st.reads) {
        assert.equal(
          holder.get(plan.slotOf.get(id)!),
          id,
          `case ${c} step ${s}: buffer ${id} was overwritten`,
        );
      }
      for (const id of st.writes) holder.set(plan.slotOf.get(id)!, id);
    });
    // The bounds, and independence from the order of the buffer list.
    assert.ok(plan.peakLiveBytes <= plan.bytesWithReuse && plan.bytesWithReuse <= plan.bytesWithoutReuse);
    assert.equal(plan.bytesWithoutReuse, buffers.reduce((a, b) => a + alignUp(b.bytes), 0));
    const shuffled = [...buffers].sort(() => r.uniform() - 0.5);
    assert.deepEqual(planMemory(shuffled, schedule), plan);
    reusedBytes += plan.bytesWithReuse;
    totalBytes += plan.bytesWithoutReuse;
  }
  assert.ok(reusedBytes < 0.8 * totalBytes, `reuse saves little: ${reusedBytes} of ${totalBytes}`);
});
