/**
 * Weight copies kept by the optimizer (compiler/passes/low_weight_copies.ts), end to end on the CUDA shim: a
 * cuda-sm90 BERT training plan (fp16, LAMB, dynamic loss scaling, GEMMs on the fake cuBLASLt) run for
 * several steps on fresh random batches, each against the reference interpreter fed copies derived from
 * the master weights. The steps: a fresh start (copies derived from the weights, as the runtime's writes
 * derive them), steps that carry the plan's own copies forward, a step skipped on overflow (weights and
 * copies unchanged), and a resume (copies derived again from the weights alone). After every step the copy
 * the plan wrote is exactly its new master weights rounded. A plan whose optimizer writes a stale copy
 * (the weights before the update) must fail both checks.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { optimizerFeeds } from "../../optimizer/feeds.ts";
import { OPT, STATE } from "../../optimizer/update.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { keptCopies, lowWeightCopies } from "../../compiler/passes/low_weight_copies.ts";
import { batchFeeds } from "../../cases/bert_feeds.ts";
import { seededRandom } from "../../cases/random.ts";
import type { Graph } from "../../ir/mod.ts";
import { LOW_COPY_PREFIX } from "../../plan/low_copies.ts";
import { type Plan, UPDATE_PREFIX } from "../../plan/plan.ts";
import { paramsFromFlat } from "../../training/run_state.ts";
import { buildPlanOnCpu, cxxVersion, planReference, runBuiltPlan } from "../util/cuda_cpu.ts";
import { assertMatchesReference, F16_TOL } from "../util/fused_check.ts";
import {
  assertCopyIsCast,
  copiedParams,
  copyTrainGraph,
  MOVING_SCHEDULE,
} from "../util/weight_copies_check.ts";

const version = await cxxVersion();
const noCxx = version ? "" : " (g++ not found)"; // in test names: the ignored list says why
const FLAT = OPT.flatParams, LOW_FLAT = LOW_COPY_PREFIX + OPT.flatParams;
type Feeds = Record<string, ArrayLike<number>>;

function compile(g: Graph) {
  return compileGraph(g, { fuse: true, target: target("cuda", PROFILES["cuda-sm90"]) });
}

/** What a step carries to the next, read from the plan's outputs (updates done in place or not). */
interface Carried {
  readonly flat: Float32Array;
  readonly m: ArrayLike<number>;
  readonly v: ArrayLike<number>;
  readonly state: Float32Array;
  /** The plan's low copies, flat; absent on a fresh start or a resume (derived from the weights). */
  readonly lowFlat?: ArrayLike<number>;
}

/**
 * Runs one step of `plan` and of the reference, which reads copies derived from the master weights,
 * and compares them; returns what the step carries. `check` false: return without comparing.
 */
async function step(
  dir: string,
  c: ReturnType<typeof compile>,
  carried: Carried,
  batch: Feeds,
  check: boolean | ((output: string) => boolean) = true,
): Promise<{ next: Carried; out: Map<string, ArrayLike<number>> }> {
  const { layout } = await graphInfo;
  const base: Feeds = {
    ...batch,
    ...Object.fromEntries(paramsFromFlat(carried.flat, layout)),
    [OPT.m]: carried.m,
    [OPT.v]: carried.v,
    [OPT.state]: carried.state,
  };
  const fed: Feeds = { ...base };
  if (carried.lowFlat) {
    for (const name of copiedParams(Object.keys(c.plan.inputs))) {
      const s = layout.segments.find((x) => x.name === name)!;
      fed[LOW_COPY_PREFIX + name] = Array.prototype.slice.call(carried.lowFlat, s.offset, s.offset + s.size);
    }
  }
  const out = await runBuiltPlan(dir, c.plan, fed);
  if (check) {
    const ref = planReference(c, base);
    assertMatchesReference(ref, Object.fromEntries(out), {
      tol: F16_TOL,
      device: "cuda-shim (cuda-sm90, weight copies)",
      plan: `${c.plan.kernels.length} kernels`,
      // Argmax counts over 2 sequences flip on near ties (fresh weights give NSP logits near 0).
      skip: (name) => name.endsWith("accuracy") || (typeof check === "function" && !check(name)),
    });
  }
  const get = (name: string) => out.get(UPDATE_PREFIX + name)!;
  return {
    out,
    next: {
      flat: Float32Array.from(get(FLAT)),
      m: get(OPT.m),
      v: get(OPT.v),
      state: Float32Array.from(get(OPT.state)),
      lowFlat: get(LOW_FLAT),
    },
  };
}

const graphInfo = copyTrainGraph("fp16", 128);

async function withPlan<T>(plan: Plan, fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-weight-copies-" });
  try {
    await buildPlanOnCpu(dir, plan, true);
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The first step's carried state: initial weights, zero moments, step 0, the loss scale. */
async function start(seed: number, lossScale: number): Promise<{ carried: Carried; batch: () => Feeds }> {
  const { g, layout, shape } = await graphInfo;
  const r = seededRandom(seed);
  const first = batchFeeds(g, shape, r, seed);
  const feeds = optimizerFeeds(layout, MOVING_SCHEDULE, { step: 0, lossScale });
  const flat = new Float32Array(layout.total);
  for (const s of layout.segments) flat.set(first[s.name] as ArrayLike<number>, s.offset);
  return {
    carried: { flat, m: feeds[OPT.m], v: feeds[OPT.v], state: Float32Array.from(feeds[OPT.state]) },
    // Fresh random data every step; the optimizer's constant tables and schedule with it.
    batch: () => {
      const b = batchFeeds(g, shape, r, seed);
      const data = Object.fromEntries(
        Object.entries(b).filter(([n]) => !layout.segments.some((s) => s.name === n)),
      );
      return {
        ...data,
        ...Object.fromEntries(Object.entries(feeds).filter(([n]) => n.startsWith("train."))),
      };
    },
  };
}

Deno.test({
  name:
    `weight copies: a cuda-sm90 fp16 training plan keeps its copies right over steps, an overflow and a resume, on the CUDA shim${noCxx}`,
  ignore: !version,
  async fn() {
    const { g, layout } = await graphInfo;
    const c = compile(g);
    // Every weight a GEMM reads rounded is a kept copy: no cast kernel is left.
    const expected = [...lowWeightCopies(g, "f16")].map((id) =>
      String(g.nodes[g.nodes[id].inputs[0]].attrs.name)
    );
    const copied = copiedParams(Object.keys(c.plan.inputs));
    assert.deepEqual(copied, [...new Set(expected)].sort());
    assert.equal(keptCopies(g, "f16").castRoots.size, 0);
    assert.ok(
      !c.plan.updates.some((u) => c.plan.buffers[u.param].name === LOW_FLAT),
      "the copies' update is a copy after the step, not written in place",
    );
    await withPlan(c.plan, async (dir) => {
      const { carried: first, batch } = await start(71, 1024);
      const check = (s: Carried, when: string) =>
        assertCopyIsCast(layout, s.flat, s.lowFlat!, copied, "f16", when);
      let s = (await step(dir, c, first, batch())).next; // fresh start: copies derived
      check(s, "after the first step");
      s = (await step(dir, c, s, batch())).next; // copies carried
      check(s, "after the second step");
      // Overflow: a loss scale no fp16 gradient survives; the step is skipped.
      const huge = Float32Array.from(s.state);
      huge[STATE.lossScale] = 2 ** 100;
      // Its gradients, norm and loss are not finite, here and in the reference: the vectors carried on are.
      const carriedOn = (name: string) => /^(new:)?(flat\.params|low:flat\.params|opt\.m|opt\.v)$/.test(name);
      const skipped = (await step(dir, c, { ...s, state: huge }, batch(), carriedOn)).next;
      assert.equal(skipped.state[STATE.overflow], 1, "the step did not overflow");
      assert.deepEqual(skipped.flat, s.flat, "a skipped step changed the weights");
      assert.deepEqual(
        Array.from(skipped.lowFlat!),
        Array.from(s.lowFlat!),
        "a skipped step changed the copies",
      );
      check(skipped, "after the skipped step");
      // The scale halved once, from 2^100, would overflow again: back to the scale before it.
      const calm = Float32Array.from(skipped.state);
      calm[STATE.lossScale] = s.state[STATE.lossScale];
      s = (await step(dir, c, { ...skipped, state: calm }, batch())).next;
      check(s, "after the step after the overflow");
      // Resume: weights, moments and state as a checkpoint holds them, no copy; derived from the weights.
      const resumed = (await step(dir, c, { ...s, lowFlat: undefined }, batch())).next;
      check(resumed, "after the resumed step");
    });
  },
});

Deno.test({
  name:
    `weight copies: a plan whose optimizer writes stale copies fails the checks, on the CUDA shim${noCxx}`,
  ignore: !version,
  async fn() {
    const { g, layout } = await graphInfo;
    // The copies' update planted as the rounding of the weights before the step, not after.
    const kept = keptCopies(g, "f16").graph;
    kept.setOutput(UPDATE_PREFIX + LOW_FLAT, kept.add("cast", [kept.outputs.get(FLAT)!], { to: "f16" }));
    const c = compile(kept);
    const copied = copiedParams(Object.keys(c.plan.inputs));
    await withPlan(c.plan, async (dir) => {
      const { carried: first, batch } = await start(72, 1024);
      const s = (await step(dir, c, first, batch(), false)).next;
      assert.throws(() => assertCopyIsCast(layout, s.flat, s.lowFlat!, copied, "f16", "stale"), /copy of/);
      await assert.rejects(() => step(dir, c, s, batch()), /max \|/);
    });
  },
});
