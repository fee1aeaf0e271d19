/**
 * Parameter groups (optimizer/flat_layout.ts): the optimizer's flat vectors cut into groups within a
 * device's binding limit. The cut keeps global offsets (checkpoints unchanged), a one-group graph is the
 * graph it always was, a tensor no group can hold is one line naming it, and training with several
 * groups on the reference interpreter matches one group (LAMB and AdamW, with accumulation), with
 * checkpoint save and resume exact through the groups.
 */
import assert from "node:assert/strict";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import { flatLayout, flatLayoutOf, LayoutError } from "../../optimizer/flat_layout.ts";
import { OPT, type OptimizerKind } from "../../optimizer/update.ts";
import type { Graph } from "../../ir/mod.ts";
import { printGraph } from "../../ir/print.ts";
import { defineBert } from "../../models/bert.ts";
import { loadModel } from "../../models/load.ts";
import { ReferenceExecutor } from "../../runtime/reference/reference_executor.ts";
import { flatGroupBudget } from "../../training/device_setup.ts";
import { seededRandom } from "../../cases/random.ts";
import {
  budgetFor,
  CONFIG,
  deviceState,
  groupedGraph,
  relativeGap,
  resume,
  save,
  start,
  STATE,
  steps,
} from "../util/group_training.ts";

// Fresh data every run; the seed is in every failure message.
const SEED = crypto.getRandomValues(new Uint32Array(1))[0] % 100000 || 1;
const openReference = (g: Graph) => Promise.resolve(new ReferenceExecutor(g));

const bits = (x: ArrayLike<number>) => new Uint32Array(Float32Array.from(x).buffer);

Deno.test("groups: contiguous runs of whole tensors within the budget, offsets as with one group", () => {
  const r = seededRandom(SEED);
  const params = Array.from({ length: 40 }, (_, i) => ({
    name: `p${i}${i % 5 === 0 ? ".bias" : ""}`,
    shape: [r.int(1, 9), r.int(1, 300)],
  }));
  const one = flatLayout(params, 64);
  assert.equal(one.groups.length, 1);
  const largest = Math.max(...one.segments.map((s) => s.chunks * 64 * 4));
  for (const budget of [largest, largest + 256 * r.int(0, 20), one.total * 2]) {
    const l = flatLayout(params, 64, { maxGroupBytes: budget });
    assert.deepEqual(l.segments.map((s) => [s.offset, s.size]), one.segments.map((s) => [s.offset, s.size]));
    assert.equal(l.total, one.total);
    let next = 0;
    for (const g of l.groups) {
      assert.equal(g.offset, next, `group ${g.index} starts where the last ended (seed ${SEED})`);
      assert.ok(g.total * 4 <= budget, `group ${g.index}: ${g.total * 4} bytes > ${budget}`);
      assert.equal(g.offset % 64, 0);
      const own = l.segments.slice(g.firstSegment, g.firstSegment + g.segmentCount);
      assert.ok(own.every((s) => s.group === g.index));
      assert.equal(own.reduce((a, s) => a + s.chunks * 64, 0), g.total);
      next += g.total;
    }
    assert.equal(next, l.total);
    // Greedy: no two neighbouring groups would fit in one.
    for (let i = 1; i < l.groups.length; i++) {
      assert.ok((l.groups[i - 1].total + l.groups[i].total) * 4 > budget);
    }
  }
});

Deno.test("groups: a tensor over the budget is a group of its own (the device binds it in ranges)", () => {
  const params = [
    { name: "small", shape: [10] },
    { name: "emb.word", shape: [1000, 64] },
    { name: "bias.a", shape: [100] },
    { name: "bias.b", shape: [100] },
  ];
  const one = flatLayout(params, 64);
  const l = flatLayout(params, 64, { maxGroupBytes: 65536 });
  assert.deepEqual(l.segments.map((s) => [s.offset, s.size]), one.segments.map((s) => [s.offset, s.size]));
  assert.deepEqual(
    l.groups.map((g) => g.segmentCount),
    [1, 1, 2],
    "the tensor before and after start groups",
  );
  assert.equal(l.groups[1].total * 4, 256000, "emb.word's group is over the budget: bound in ranges");
  // The fixture under a 1 KiB budget: its embeddings are over it, and the graph builds.
  const { layout } = groupedGraph("lamb", 1024);
  const alone = layout.groups.filter((g) => g.total * 4 > 1024);
  assert.ok(alone.length > 0 && alone.every((g) => g.segmentCount === 1), "over-budget tensors stand alone");
  assert.throws(() => flatLayout(params, 64, { maxGroupBytes: 0 }), LayoutError);
  assert.equal(flatGroupBudget({}), undefined, "CUDA, CPU, reference: no limit, one group");
  assert.equal(flatGroupBudget({ maxStorageBindingBytes: 1 << 27, maxBufferBytes: 2 ** 31 }), 1 << 27);
  assert.equal(flatGroupBudget({ maxStorageBindingBytes: 1 << 27 }, 4096), 4096);
});

Deno.test("groups: a model that fits in one group gets the graph it always had (names and nodes)", async () => {
  const model = await loadModel(new URL("../../models/bert-tiny.ts", import.meta.url).pathname);
  for (const [kind, accumulationSteps] of [["lamb", 1], ["adamw", 2]] as const) {
    const build = (maxGroupBytes?: number) =>
      buildModelGraph({
        model,
        mode: "train",
        precision: "fp32",
        batchSize: 2,
        seqLen: 16,
        optimizer: { kind, accumulationSteps, maxGroupBytes },
      });
    const plain = build();
    const total = flatLayoutOf(plain).total;
    assert.equal(printGraph(build(total * 4)), printGraph(plain), `${kind}: budget = the whole vector`);
    assert.equal(printGraph(build(2 ** 27)), printGraph(plain), `${kind}: lavapipe's 128 MiB`);
    const names = [
      OPT.m,
      OPT.v,
      OPT.segments,
      OPT.chunkSegment,
      ...(accumulationSteps > 1 ? [OPT.gradAcc] : []),
    ];
    for (const name of names) {
      assert.ok(plain.sources("input").has(name), name);
    }
    assert.ok(plain.outputs.has(OPT.flatParams));
  }
});

async function compareGroupings(kind: OptimizerKind, accumulationSteps: number): Promise<void> {
  const plain = groupedGraph(kind).layout;
  const budget = budgetFor(plain, 4);
  const one = await start(openReference, kind, undefined, SEED, accumulationSteps);
  const cut = await start(openReference, kind, budget, SEED, accumulationSteps);
  assert.ok(cut.layout.groups.length >= 3, `${cut.layout.groups.length} groups`);
  for (const n of cut.layout.groups.keys()) {
    assert.ok(cut.graph.sources("input").has(`${OPT.m}.${n}`), `${OPT.m}.${n}`);
  }
  await steps(one, 3, SEED, accumulationSteps);
  await steps(cut, 3, SEED, accumulationSteps);
  const [a, b] = [await deviceState(one), await deviceState(cut)];
  const what =
    `${kind}, ${cut.layout.groups.length} groups, accumulation ${accumulationSteps} (seed ${SEED})`;
  assert.equal(b.state[STATE.step], 3, what);
  assert.deepEqual(
    [b.state[STATE.step], b.state[STATE.skippedSteps]],
    [a.state[STATE.step], a.state[STATE.skippedSteps]],
  );
  assert.ok(Math.abs(b.state[STATE.gradNorm] / a.state[STATE.gradNorm] - 1) < 1e-5, `grad norm: ${what}`);
  // Only the order of the global norm's sum differs: float rounding, nothing more.
  const gaps = {
    weights: relativeGap(b.flatParams, a.flatParams),
    m: relativeGap(b.m, a.m),
    v: relativeGap(b.v, a.v),
  };
  for (const [name, gap] of Object.entries(gaps)) assert.ok(gap < 1e-5, `${name} gap ${gap}: ${what}`);
  if (Deno.env.get("GROUPS_VERBOSE")) console.log(what, gaps);
  // The weights moved: the comparison is of a real update.
  assert.ok(relativeGap(b.flatParams, (await deviceStateAt0(kind)).flatParams) > 1e-4, what);
}

async function deviceStateAt0(kind: OptimizerKind) {
  return await deviceState(await start(openReference, kind, undefined, SEED));
}

for (const kind of ["lamb", "adamw"] as const) {
  Deno.test(`groups: ${kind} in >= 3 groups trains as in one (reference interpreter)`, () =>
    compareGroupings(kind, 1));
}
Deno.test("groups: gradient accumulation in groups (AdamW, 2 micro-batches, reference)", () =>
  compareGroupings("adamw", 2));

Deno.test("groups: checkpoint save and resume through the groups are exact; the format is unchanged", async () => {
  const budget = budgetFor(groupedGraph("lamb").layout, 4);
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-groups-" });
  try {
    const straight = await start(openReference, "lamb", budget, SEED);
    await steps(straight, 3, SEED);
    const split = await start(openReference, "lamb", budget, SEED);
    await steps(split, 2, SEED);
    const ck = await save(split, dir, SEED);
    // A fresh session of the same grouping continues the run bit for bit.
    const resumed = await start(openReference, "lamb", budget, SEED);
    await resume(resumed, ck);
    await steps(resumed, 1, SEED);
    const [a, b] = [await deviceState(straight), await deviceState(resumed)];
    assert.deepEqual(bits(b.flatParams), bits(a.flatParams), `weights (seed ${SEED})`);
    assert.deepEqual(bits(b.m), bits(a.m), "m");
    assert.deepEqual(bits(b.v), bits(a.v), "v");
    assert.deepEqual(bits(b.state), bits(a.state), "state");
    // The checkpoint holds the logical vectors: a one-group session reads exactly what was saved.
    const saved = await deviceState(split);
    const whole = await start(openReference, "lamb", undefined, SEED);
    await resume(whole, ck);
    const back = await deviceState(whole);
    assert.equal(whole.layout.groups.length, 1);
    assert.deepEqual(bits(back.flatParams), bits(saved.flatParams));
    assert.deepEqual(bits(back.v), bits(saved.v));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("groups: the fixture config is the small one (keeps these tests fast)", () => {
  assert.ok(defineBert("x", CONFIG).config.vocab_size < 1000);
});
