/**
 * Resuming from a checkpoint whose flat moments were laid out with another chunk size (an earlier version
 * chose fewer, larger chunks): each tensor's moments land at its offset in the run's layout, and a
 * checkpoint of another model is still refused.
 */
import assert from "node:assert/strict";
import { flatLayout } from "../../optimizer/flat_layout.ts";
import { OPT } from "../../optimizer/update.ts";
import { seededRandom } from "../../cases/random.ts";
import type { StepExecutor } from "../../runtime/backend.ts";
import { CheckpointError, type LoadedCheckpoint } from "../../training/checkpoint.ts";
import { checkLayout, layoutRecord, restoreOptimizer } from "../../training/run_state.ts";

// Fresh data every run; the seed is in every failure message.
const SEED = crypto.getRandomValues(new Uint32Array(1))[0] % 100000 || 1;

function paramsOf(r: ReturnType<typeof seededRandom>) {
  return Array.from({ length: 12 }, (_, i) => ({
    name: `layer${i}.${i % 3 === 0 ? "bias" : "weight"}`,
    shape: i % 3 === 0 ? [r.int(1, 200)] : [r.int(1, 40), r.int(1, 90)],
  }));
}

/** A flat vector of `layout` holding fresh values in each tensor's range and zeros in the padding. */
function flatOf(layout: ReturnType<typeof flatLayout>, r: ReturnType<typeof seededRandom>) {
  const flat = new Float32Array(layout.total);
  for (const s of layout.segments) for (let i = 0; i < s.size; i++) flat[s.offset + i] = r.normal();
  return flat;
}

Deno.test(`resume: moments saved with 64-element chunks are moved into a 256-element layout (seed ${SEED})`, () => {
  const r = seededRandom(SEED);
  const params = paramsOf(r);
  const saved = flatLayout(params, 64), run = flatLayout(params, 256);
  assert.notEqual(
    saved.total,
    run.total,
    `seed ${SEED}: the two layouts must differ for this test to mean anything`,
  );
  const m = flatOf(saved, r), v = flatOf(saved, r);
  const ck = { dir: "ck", optimizer: new Map([[OPT.m, m], [OPT.v, v]]) } as unknown as LoadedCheckpoint;
  const written = new Map<string, Float32Array>();
  const ex = { write: (name: string, x: ArrayLike<number>) => written.set(name, Float32Array.from(x)) };
  restoreOptimizer(ex as unknown as StepExecutor, ck, run, checkLayout("ck", layoutRecord(saved), run));
  for (const [name, src] of [[OPT.m, m], [OPT.v, v]] as const) {
    const got = written.get(name);
    assert.ok(got, `${name} was written`);
    assert.equal(got.length, run.total);
    saved.segments.forEach((s, i) => {
      const at = run.segments[i];
      assert.deepEqual(
        got.subarray(at.offset, at.offset + at.size),
        src.subarray(s.offset, s.offset + s.size),
        `seed ${SEED}: ${name} of ${s.name}`,
      );
    });
  }
});

Deno.test("resume: the same layout passes the moments through; another model's checkpoint is refused", () => {
  const r = seededRandom(SEED + 1);
  const params = paramsOf(r);
  const layout = flatLayout(params, 128);
  const same = checkLayout("ck", layoutRecord(layout), layout);
  const flat = flatOf(layout, r);
  assert.equal(same.total, layout.total);
  assert.equal(same.inLayout(flat), flat);
  const other = flatLayout([...params.slice(1), params[0]], 128);
  assert.throws(() => checkLayout("ck", layoutRecord(other), layout), CheckpointError);
  const bigger = flatLayout([...params, { name: "extra.weight", shape: [3, 3] }], 128);
  assert.throws(() => checkLayout("ck", layoutRecord(bigger), layout), CheckpointError);
  const forged = { ...layoutRecord(layout), total: layout.total + 64 };
  assert.throws(() => checkLayout("ck", forged, layout), CheckpointError);
  assert.throws(() => checkLayout("ck", undefined, layout), CheckpointError);
});
