/**
 * The life of weight copies kept by the optimizer (compiler/passes/low_weight_copies.ts, engine/low_copy_refresh.ts),
 * through the trainer's own device code (training/device_setup.ts): the graph with its copies as state,
 * in the reference interpreter behind the engine's refreshing executor, against the graph that rounds its
 * weights on load, step for step and bit for bit: a fresh start, steps on fresh random batches, a step
 * skipped on overflow, weights set between steps, a checkpoint saved and resumed (the checkpoint holds no
 * copy). After every step the copies are exactly the master weights rounded. An executor that does not
 * refresh the copies when weights are set (a planted stale copy) must diverge.
 */
import { BATCH_INPUTS } from "../../data/heldout.ts";
import assert from "node:assert/strict";
import { flatNames } from "../../optimizer/feeds.ts";
import { OPT, STATE } from "../../optimizer/update.ts";
import { keptCopies } from "../../compiler/passes/low_weight_copies.ts";
import { batchFeeds } from "../../cases/bert_feeds.ts";
import { seededRandom } from "../../cases/random.ts";
import { refreshingLowCopies } from "../../engine/low_copy_refresh.ts";
import type { Graph } from "../../ir/mod.ts";
import { initParams } from "../../model_io/init_params.ts";
import { LOW_COPY_PREFIX } from "../../plan/low_copies.ts";
import type { StepExecutor } from "../../runtime/backend.ts";
import { ReferenceExecutor } from "../../runtime/reference/reference_executor.ts";
import { readCheckpoint } from "../../training/checkpoint.ts";
import {
  launchUpdate,
  saveDeviceCheckpoint,
  writeCheckpointStart,
  writeFreshStart,
  writeOptimizerConstants,
} from "../../training/device_setup.ts";
import { readDeviceState, readFlat } from "../../training/run_state.ts";
import {
  assertCopyIsCast,
  copiedParams,
  copyTrainGraph,
  MOVING_SCHEDULE,
} from "../util/weight_copies_check.ts";

const info = await copyTrainGraph("fp16", 128);
const { g, layout, shape } = info;
const kept = keptCopies(g, "f16");
const copied = copiedParams(kept.graph.sources("input").keys());

/** The names a plan of `graph` would have: what the engine's executor view looks up. */
function namesOf(graph: Graph) {
  return {
    inputs: Object.fromEntries([...graph.sources("input").keys()].map((n) => [n, 0])),
    outputs: Object.fromEntries([...graph.outputs.keys()].map((n) => [n, 0])),
  };
}

/** Executors of the graph rounding on load (the truth) and of the graph with copies, refreshed or not. */
function open(which: "rounding" | "copies" | "copies, never refreshed"): StepExecutor {
  if (which === "rounding") return new ReferenceExecutor(g);
  const ex = new ReferenceExecutor(kept.graph);
  return which === "copies" ? refreshingLowCopies(ex, namesOf(kept.graph)) : ex;
}

async function step(ex: StepExecutor, n: number): Promise<void> {
  const r = seededRandom(4000 + n); // fresh data each step, the same for every executor
  await launchUpdate(ex, {
    seed: 9,
    step: n,
    accumulationSteps: 1,
    feed: () => {
      const f = batchFeeds(g, shape, r, 0);
      for (const name of BATCH_INPUTS) ex.write(name, f[name]);
    },
  });
}

/** The first index where two vectors differ (Object.is: bit for bit, NaN equal to NaN), or -1. */
function firstDifference(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return 0;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return i;
  return -1;
}

/**
 * Weights, moments and state of two executors are equal, bit for bit. (A short message of its own: the
 * diff node:assert writes for two long arrays takes minutes.)
 */
async function assertSame(a: StepExecutor, b: StepExecutor, when: string): Promise<void> {
  const [x, y] = [await readDeviceState(a, layout), await readDeviceState(b, layout)];
  const vectors: [string, ArrayLike<number>, ArrayLike<number>][] = [
    ["weights", x.flatParams, y.flatParams],
    ["state", x.state, y.state],
    ...[...x.optimizer].map(([name, t]): [string, ArrayLike<number>, ArrayLike<number>] => {
      const u = y.optimizer.get(name)!;
      return [name, t instanceof Float32Array ? t : t.data, u instanceof Float32Array ? u : u.data];
    }),
  ];
  for (const [what, p, q] of vectors) {
    const i = firstDifference(p, q);
    assert.ok(i < 0, `${when}: ${what} differ at ${i}: ${p[i]} and ${q[i]}`);
  }
}

/** The copies an executor of the copies graph holds are its master weights rounded (every group's). */
async function assertCopies(ex: StepExecutor, when: string, l = layout, names = copied): Promise<void> {
  const master = await readFlat(ex, l, OPT.flatParams);
  const lowFlat = new Float32Array(l.total);
  for (const [gi, name] of flatNames(l, OPT.flatParams).entries()) {
    lowFlat.set(await ex.read(LOW_COPY_PREFIX + name), l.groups[gi].offset);
  }
  assertCopyIsCast(l, master, lowFlat, names, "f16", when);
}

function freshStart(ex: StepExecutor): void {
  writeOptimizerConstants(ex, layout, MOVING_SCHEDULE, 1);
  writeFreshStart(ex, layout, initParams(g, 5), 1024);
}

Deno.test("weight copies over a training run: fresh start, overflow, weights set, resume (reference interpreter)", async () => {
  assert.ok(
    copied.length > 0 && kept.castRoots.size === 0,
    "the graph keeps no copy: the test checks nothing",
  );
  const truth = open("rounding"), ex = open("copies");
  for (const e of [truth, ex]) freshStart(e);
  let n = 0;
  for (; n < 2; n++) {
    for (const e of [truth, ex]) await step(e, n);
    await assertSame(truth, ex, `step ${n}`);
    await assertCopies(ex, `after step ${n}`);
  }
  // Overflow: the step is skipped, weights and copies unchanged.
  const before = await readFlat(ex, layout, OPT.flatParams);
  for (const e of [truth, ex]) {
    const state = Float32Array.from(await e.read(OPT.state));
    state[STATE.lossScale] = 2 ** 100;
    e.write(OPT.state, state);
    await step(e, n);
  }
  n++;
  assert.equal((await ex.read(OPT.state))[STATE.overflow], 1, "the step did not overflow");
  assert.deepEqual(await readFlat(ex, layout, OPT.flatParams), before, "a skipped step changed the weights");
  await assertSame(truth, ex, "the skipped step");
  await assertCopies(ex, "after the skipped step");
  // The scale halved once, from 2^100, would overflow again: back to the scale before it.
  for (const e of [truth, ex]) {
    const state = Float32Array.from(await e.read(OPT.state));
    state[STATE.lossScale] = 1024;
    e.write(OPT.state, state);
  }
  // Weights set between steps (as a user or a tool may): the copies follow; the stale ones do not.
  // The stale executor: the same state, its copies those of the weights before they were set.
  const stale = open("copies, never refreshed");
  writeOptimizerConstants(stale, layout, MOVING_SCHEDULE, 1);
  const now = await readDeviceState(ex, layout);
  stale.write(OPT.flatParams, now.flatParams);
  for (const [name, t] of now.optimizer) stale.write(name, t instanceof Float32Array ? t : t.data);
  stale.write(OPT.state, now.state);
  for (const name of copied) {
    const s = layout.segments.find((x) => x.name === name)!;
    stale.write(LOW_COPY_PREFIX + name, before.subarray(s.offset, s.offset + s.size));
  }
  const moved = before.map((w, i) => w * (1 + 0.25 * Math.sin(i)));
  for (const e of [truth, ex, stale]) e.write(OPT.flatParams, moved);
  for (const e of [truth, ex, stale]) await step(e, n);
  n++;
  assert.equal((await ex.read(OPT.state))[STATE.overflow], 0, "the step after weights were set overflowed");
  await assertSame(truth, ex, "a step after weights were set");
  await assertCopies(ex, "after weights were set");
  await assert.rejects(() => assertSame(truth, stale, "stale"), /weights differ/);
  // Save, then resume on a fresh executor: the copies come from the checkpoint's weights.
  const runDir = await Deno.makeTempDir({ prefix: "bertfuse-copies-ckpt-" });
  try {
    const save = (e: StepExecutor) =>
      saveDeviceCheckpoint(e, {
        runDir,
        step: n,
        graph: g,
        layout,
        config: {},
        schedule: MOVING_SCHEDULE,
        seed: 9,
        keep: 1,
        extra: {},
      });
    const dir = await save(ex);
    const ck = await readCheckpoint(dir);
    assert.ok(
      ![...ck.optimizer.keys()].some((k) => k.startsWith(LOW_COPY_PREFIX)),
      "the checkpoint holds copies",
    );
    const resumed = open("copies");
    writeOptimizerConstants(resumed, layout, MOVING_SCHEDULE, 1);
    resumed.write(OPT.state, writeCheckpointStart(resumed, ck, layout));
    for (const e of [truth, resumed]) await step(e, n);
    await assertSame(truth, resumed, "the resumed step");
    await assertCopies(resumed, "after the resumed step");
  } finally {
    await Deno.remove(runDir, { recursive: true });
  }
});

Deno.test("weight copies: the engine's executor view writes a copy with its source, also from the executor's own run()", async () => {
  /** An executor whose run() writes its feeds through `this`, as the CUDA and WebGPU executors do. */
  class Recording implements StepExecutor {
    readonly writes: string[] = [];
    write(name: string, _data: ArrayLike<number>): void {
      this.writes.push(name);
    }
    read(_name: string): Promise<ArrayLike<number>> {
      return Promise.resolve([]);
    }
    step(): Promise<void> {
      return Promise.resolve();
    }
    async run(feeds: Record<string, ArrayLike<number>>): Promise<void> {
      for (const [name, data] of Object.entries(feeds)) this.write(name, data);
      await this.step();
    }
    destroy(): void {}
  }
  const plan = { inputs: { w: 0, "low:w": 1, x: 2 }, outputs: { "flat.params": 3, "low:flat.params": 4 } };
  const inner = new Recording();
  const ex = refreshingLowCopies(inner, plan);
  ex.write("flat.params", [1]);
  ex.write("x", [1]);
  await ex.run({ w: [2] });
  ex.write("low:w", [3]); // a copy written by name is not copied again
  assert.deepEqual(inner.writes, ["flat.params", "low:flat.params", "x", "w", "low:w", "low:w"]);
  // A plan without copies: the executor itself, untouched.
  const plain = new Recording();
  assert.equal(refreshingLowCopies(plain, { inputs: { w: 0 }, outputs: {} }), plain);
});

Deno.test("weight copies with the flat vectors in groups and micro-batches that only accumulate (reference interpreter)", async () => {
  const budget = Math.ceil(layout.total * 4 / 3); // about three groups
  const grouped = await copyTrainGraph("fp16", 128, 8, { maxGroupBytes: budget, accumulationSteps: 2 });
  const l = grouped.layout;
  assert.ok(l.groups.length > 1, "one group: the test checks nothing about groups");
  const keptGrouped = keptCopies(grouped.g, "f16");
  const names = copiedParams(keptGrouped.graph.sources("input").keys());
  assert.ok(names.length > 0 && keptGrouped.castRoots.size === 0);
  // One copies vector per group, each updated.
  for (const name of flatNames(l, OPT.flatParams)) {
    assert.ok(
      keptGrouped.graph.outputs.has(`new:${LOW_COPY_PREFIX}${name}`),
      `no update of ${name}'s copies`,
    );
  }
  const truth: StepExecutor = new ReferenceExecutor(grouped.g);
  const ex = refreshingLowCopies(new ReferenceExecutor(keptGrouped.graph), namesOf(keptGrouped.graph));
  for (const e of [truth, ex]) {
    writeOptimizerConstants(e, l, MOVING_SCHEDULE, 2);
    writeFreshStart(e, l, initParams(grouped.g, 6), 1024);
  }
  let last = await readFlat(ex, l, OPT.flatParams); // unchanged by an accumulating micro-batch only
  for (let n = 0; n < 2; n++) {
    for (let micro = 0; micro < 2; micro++) {
      const f = batchFeeds(grouped.g, grouped.shape, seededRandom(5000 + 2 * n + micro), 0);
      for (const e of [truth, ex]) {
        for (const name of BATCH_INPUTS) e.write(name, f[name]);
        e.write("rng_key", [9, 2 * n + micro]);
        e.write(OPT.apply, [micro]);
        await e.step();
      }
      const [x, y] = [await readFlat(truth, l, OPT.flatParams), await readFlat(ex, l, OPT.flatParams)];
      assert.equal(firstDifference(x, y), -1, `update ${n}, micro-batch ${micro}: weights differ`);
      assert.equal(firstDifference(y, last) < 0, micro === 0, `micro-batch ${micro} of update ${n}`);
      last = y;
      // Also after a micro-batch that only accumulates: the copies are still the weights'.
      await assertCopies(ex, `update ${n}, micro-batch ${micro}`, l, names);
    }
  }
});
