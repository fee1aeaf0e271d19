/**
 * The fuzzer's WebGPU run (cases/fuzz/): a fixed range of seeds plus a range derived from the commit
 * (cases/fuzz/seeds.ts), each graph compiled fused and unfused and run on WebGPU (lavapipe in CI), every
 * output element against the f64 reference within its conditioning-derived bound. A failure prints each
 * failing seed with its one-line replay command. FUZZ_WEBGPU_COUNT / FUZZ_WEBGPU_EXTRA resize the run.
 */
import assert from "node:assert/strict";
import {
  describeFailures,
  describeList,
  explorationReport,
  fuzzRun,
  splitByOrigin,
} from "../../cases/fuzz/run.ts";
import { ciSeeds, commitSeed } from "../../cases/fuzz/seeds.ts";
import { webgpuDevice } from "../util/fuzz_devices.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();
const FIXED = Number(Deno.env.get("FUZZ_WEBGPU_COUNT") ?? 96);
const EXTRA = Number(Deno.env.get("FUZZ_WEBGPU_EXTRA") ?? 32);

Deno.test({
  name: `fuzz on WebGPU: ${FIXED} fixed and ${EXTRA} commit-derived random graphs, fused and unfused`,
  ignore: !gpu.ctx,
  fn: async () => {
    const { seed, from } = await commitSeed();
    const seeds = ciSeeds(FIXED, seed, EXTRA);
    console.log(`fuzz seeds 1..${FIXED} and ${seed}..${seed + EXTRA - 1} (${from})`);
    const s = await fuzzRun({ seeds, devices: [webgpuDevice(gpu.ctx!)], modes: [true, false], batch: 16 });
    const { checked, unchecked, sharp } = s.elements;
    console.log(
      `fuzz on WebGPU: ${s.graphs} graphs in ${(s.ms / 1000).toFixed(1)} s, ${checked} elements checked ` +
        `(${sharp} within 1% of their output's scale), ${unchecked} unbounded`,
    );
    if (s.known.length) {
      console.log(`known compiler bugs (cases/fuzz/known.ts):\n${describeFailures(s, "known")}`);
    }
    const { regressions, found } = splitByOrigin([s], new Set(seeds.slice(FIXED)));
    if (found.length) console.log(explorationReport(found));
    assert.equal(regressions.length, 0, `fuzz failures in the fixed range:\n${describeList(regressions)}`);
    // Every other graph compared something in both modes (one whose outputs were all unbounded is no check).
    const notCounted = new Set([...s.known, ...found].map((f) => f.seed));
    assert.equal(s.graphs, seeds.length - notCounted.size);
  },
});
