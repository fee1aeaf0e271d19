/**
 * One CI fuzz tier (tests/webgpu/fuzz.test.ts, tests/nvcc/fuzz.test.ts, tests/cpu/fuzz_cpu.test.ts): a
 * fixed seed range plus the commit's range (seeds.ts), offset so each tier checks its own graphs, run in
 * chunks (a device may differ per chunk, e.g. library GEMMs in even chunks and template GEMMs in odd ones),
 * every graph fused and unfused. It prints the seeds, a line with the graphs checked and the seconds, known
 * bugs, and the exploration report; the caller asserts on `regressions` and `graphs`.
 */
import type { FuzzDevice } from "./check.ts";
import { describeList, explorationReport, fuzzRun, type RunSummary, splitByOrigin } from "./run.ts";
import { ciSeeds, commitSeed } from "./seeds.ts";

export interface TierOptions {
  /** The device's name in the summary line ("WebGPU", "the CUDA shim", …). */
  readonly label: string;
  readonly fixed: number;
  readonly extra: number;
  /** Added to every seed: 0 for 1..fixed; tiers use offsets far apart so their graphs differ. */
  readonly offset: number;
  /** Seeds per fuzzRun; each chunk asks `device` for its device. */
  readonly chunk: number;
  /** Graphs per compile within a chunk (default: the chunk). */
  readonly batch?: number;
  readonly device: (chunk: number) => FuzzDevice;
  readonly log?: (line: string) => void;
}

export interface TierResult {
  /** Graphs whose every output was compared, fused and unfused, and passed (or failed in the fixed range). */
  readonly graphs: number;
  /** Graphs that should have been counted: every seed except known bugs, findings and `uncompared`. */
  readonly expected: number;
  /** Seeds of the fixed range that compared nothing (RunSummary.uncompared); reported, not counted. */
  readonly uncomparedFixed: readonly number[];
  readonly seconds: number;
  /** Failures in the fixed range: these fail CI. */
  readonly regressions: RunSummary["failures"];
  /** Failures of the commit's range: reported, not failed. */
  readonly found: RunSummary["failures"];
  readonly summary: string;
}

export async function fuzzTier(o: TierOptions): Promise<TierResult> {
  const log = o.log ?? ((l: string) => console.log(l));
  const { seed, from } = await commitSeed();
  const seeds = ciSeeds(o.fixed, seed, o.extra).map((s) => s + o.offset);
  log(
    `fuzz seeds ${seeds[0]}..${seeds[o.fixed - 1]} and ${seed + o.offset}..${
      seed + o.offset + o.extra - 1
    } (${from})`,
  );
  const t0 = performance.now();
  const runs: RunSummary[] = [];
  for (let i = 0; i < seeds.length; i += o.chunk) {
    runs.push(
      await fuzzRun({
        seeds: seeds.slice(i, i + o.chunk),
        devices: [o.device(i / o.chunk)],
        modes: [true, false],
        batch: o.batch ?? o.chunk,
        // A line per batch and mode: progress in a long CI log, and where the time went.
        log,
      }),
    );
  }
  const seconds = (performance.now() - t0) / 1000;
  const graphs = runs.reduce((a, s) => a + s.graphs, 0);
  const checked = runs.reduce((a, s) => a + s.elements.checked, 0);
  const sharp = runs.reduce((a, s) => a + s.elements.sharp, 0);
  const unchecked = runs.reduce((a, s) => a + s.elements.unchecked, 0);
  const summary = `fuzz on ${o.label}: ${graphs} graphs (fused and unfused) in ${seconds.toFixed(1)} s, ` +
    `${checked} elements checked (${sharp} within 1% of their output's scale), ${unchecked} unbounded`;
  log(summary);
  const known = runs.flatMap((s) => s.known);
  if (known.length) log(`known compiler bugs (cases/fuzz/known.ts):\n${describeList(known)}`);
  const { regressions, found } = splitByOrigin(runs, new Set(seeds.slice(o.fixed)));
  if (found.length) log(explorationReport(found));
  const uncompared = runs.flatMap((s) => s.uncompared);
  if (uncompared.length) {
    log(
      `not counted: ${uncompared.length} graph(s) that compared nothing in some mode (every output ` +
        `unbounded, no bug shown): ${uncompared.join(", ")}`,
    );
  }
  const notCounted = new Set([...[...known, ...found].map((f) => f.seed), ...uncompared]);
  const fixed = new Set(seeds.slice(0, o.fixed));
  return {
    graphs,
    expected: seeds.length - notCounted.size,
    uncomparedFixed: uncompared.filter((s) => fixed.has(s)),
    seconds,
    regressions,
    found,
    summary,
  };
}
