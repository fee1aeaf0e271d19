/**
 * The fuzzer's CUDA run (cases/fuzz/): a fixed range of seeds plus a range derived from the commit
 * (cases/fuzz/seeds.ts), each graph compiled fused and unfused for CUDA and run on the CPU through g++
 * and the shim of tests/util/cuda_cpu.ts (GEMMs as the plan's cuBLASLt calls in even batches, as
 * template kernels in odd ones), every output element against the f64 reference within its
 * conditioning-derived bound. FUZZ_CUDA_COUNT / FUZZ_CUDA_EXTRA resize the run. Without g++ it is ignored.
 */
import assert from "node:assert/strict";
import {
  describeFailures,
  describeList,
  explorationReport,
  fuzzRun,
  type RunSummary,
  splitByOrigin,
} from "../../cases/fuzz/run.ts";
import { ciSeeds, commitSeed } from "../../cases/fuzz/seeds.ts";
import { CXX, cxxVersion } from "../util/cuda_cpu.ts";
import { cudaShimDevice } from "../util/fuzz_devices.ts";

const version = await cxxVersion();
if (!version) console.log(`CUDA fuzz ignored: ${CXX} not found`);
const FIXED = Number(Deno.env.get("FUZZ_CUDA_COUNT") ?? 224);
const EXTRA = Number(Deno.env.get("FUZZ_CUDA_EXTRA") ?? 64);
const BATCH = 32;

Deno.test({
  name: `fuzz on CUDA through the CPU shim: ${FIXED} fixed and ${EXTRA} commit-derived random graphs`,
  ignore: !version,
  fn: async () => {
    const { seed, from } = await commitSeed();
    // Seeds far from the WebGPU run's, so the two tiers check different graphs.
    const seeds = ciSeeds(FIXED, seed, EXTRA).map((s) => s + 500_000);
    console.log(`fuzz seeds ${seeds[0]}..${seeds[FIXED - 1]} and ${seed + 500_000}.. (${from})`);
    const runs: RunSummary[] = [];
    for (let i = 0; i < seeds.length; i += BATCH) {
      const library = (i / BATCH) % 2 === 0;
      const part = seeds.slice(i, i + BATCH);
      runs.push(
        await fuzzRun({
          seeds: part,
          devices: [cudaShimDevice(library)],
          modes: [true, false],
          batch: BATCH,
        }),
      );
    }
    const graphs = runs.reduce((a, s) => a + s.graphs, 0);
    const checked = runs.reduce((a, s) => a + s.elements.checked, 0);
    const ms = runs.reduce((a, s) => a + s.ms, 0);
    console.log(
      `fuzz on the CUDA shim: ${graphs} graphs in ${(ms / 1000).toFixed(1)} s, ${checked} elements checked`,
    );
    const known = runs.filter((s) => s.known.length > 0);
    if (known.length) {
      console.log(
        `known compiler bugs (cases/fuzz/known.ts):\n${
          known.map((s) => describeFailures(s, "known")).join("\n")
        }`,
      );
    }
    const { regressions, found } = splitByOrigin(runs, new Set(seeds.slice(FIXED)));
    if (found.length) console.log(explorationReport(found));
    assert.equal(regressions.length, 0, `fuzz failures in the fixed range:\n${describeList(regressions)}`);
    const knownSeeds = new Set(runs.flatMap((s) => s.known.map((f) => f.seed)));
    const foundSeeds = new Set(found.map((f) => f.seed));
    assert.equal(graphs, seeds.length - knownSeeds.size - foundSeeds.size);
  },
});
