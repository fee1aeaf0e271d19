/**
 * A fuzz run: seeds in batches, each batch checked on every device in every fusion mode asked for, a
 * line per batch and a summary; every failing seed comes with the one-line command that replays it.
 * Shared by the fuzz tests (tests/webgpu/fuzz.test.ts, tests/nvcc/fuzz.test.ts) and `deno task fuzz`.
 */
import { type BatchReport, checkBatch, type Failure, type FuzzDevice, replayCommand } from "./check.ts";
import { knownBug } from "./known.ts";

export interface RunOptions {
  readonly seeds: readonly number[];
  readonly devices: readonly FuzzDevice[];
  readonly modes: readonly boolean[];
  /** Graphs per compile (default 16). */
  readonly batch?: number;
  readonly log?: (line: string) => void;
}

export interface RunSummary {
  /** Seeds whose every output was compared on every device and mode asked for. */
  readonly graphs: number;
  /**
   * Seeds that failed nowhere but compared nothing in some device or mode: every element's bound was
   * infinite (e.g. a softmax whose f16-stored scores are too uncertain to bound its normaliser away from
   * 0). Not counted as graphs, not failures: no bug is shown, and none can be.
   */
  readonly uncompared: readonly number[];
  readonly elements: { readonly checked: number; readonly unchecked: number; readonly sharp: number };
  readonly failures: readonly (Failure & { readonly replay: string })[];
  /** Failures that match a known, unfixed compiler bug (cases/fuzz/known.ts). */
  readonly known: readonly (Failure & { readonly replay: string })[];
  readonly ms: number;
}

export async function fuzzRun(o: RunOptions): Promise<RunSummary> {
  const t0 = performance.now();
  const size = o.batch ?? 16;
  const log = o.log ?? (() => {});
  const elements = { checked: 0, unchecked: 0, sharp: 0 };
  const failures: (Failure & { replay: string })[] = [];
  const known: (Failure & { replay: string })[] = [];
  const graphs = new Set<number>(o.seeds);
  const empty = new Set<number>(), failed = new Set<number>();
  for (let i = 0; i < o.seeds.length; i += size) {
    const seeds = o.seeds.slice(i, i + size);
    for (const dev of o.devices) {
      for (const fuse of o.modes) {
        const rep: BatchReport = await checkBatch(seeds, fuse, dev);
        const bad = new Set<number>();
        for (const v of rep.verdicts) {
          elements.checked += v.checked;
          elements.unchecked += v.unchecked;
          elements.sharp += v.sharp;
          if (v.checked === 0) {
            graphs.delete(v.seed);
            empty.add(v.seed);
          }
          if (v.failures.length === 0) continue;
          bad.add(v.seed);
          failed.add(v.seed);
          graphs.delete(v.seed);
          const replay = replayCommand(v.seed, dev, fuse, { first: seeds[0], count: seeds.length });
          // The first failing element of each output is enough to replay and diagnose.
          const firstPerOutput = new Map(v.failures.map((f) => [f.output, f] as const));
          for (const f of firstPerOutput.values()) {
            (knownBug(f.message, f.seed) ? known : failures).push({ ...f, replay });
          }
        }
        const ms = rep.ms.build + rep.ms.compile + rep.ms.run + rep.ms.check;
        log(
          `seeds ${seeds[0]}..${seeds.at(-1)} ${dev.name} ${
            fuse ? "fused" : "unfused"
          }: ${rep.kernels} kernels, ` +
            `${sec(ms)} s (graphs ${sec(rep.ms.build)}, compile ${sec(rep.ms.compile)}, ` +
            `run ${sec(rep.ms.run)}, check ${sec(rep.ms.check)})` +
            (bad.size ? `, FAILED: ${[...bad].join(", ")}` : ""),
        );
      }
    }
  }
  const uncompared = [...empty].filter((s) => !failed.has(s));
  return { graphs: graphs.size, uncompared, elements, failures, known, ms: performance.now() - t0 };
}

const sec = (ms: number) => (ms / 1000).toFixed(1);

/** One failure a line, each with its replay command. */
export function describeList(list: readonly (Failure & { readonly replay: string })[]): string {
  return list.map((f) => `seed ${f.seed}: ${f.message}\n  replay: ${f.replay}`).join("\n");
}

/**
 * A CI run's failures split by where their seed came from. The fixed range is the regression gate: the
 * same graphs every run, so a failure there is this change's (or an unlisted known bug) and fails the run.
 * The commit-derived range explores graphs no run saw before; what it finds is a bug that is usually
 * older than the change that happened to draw it, so it is reported loudly with its replay command (to be
 * fixed, or listed in known.ts and moved into the fixed range) instead of blocking an unrelated change.
 */
export function splitByOrigin(
  runs: readonly RunSummary[],
  explored: ReadonlySet<number>,
): { regressions: RunSummary["failures"]; found: RunSummary["failures"] } {
  const all = runs.flatMap((r) => r.failures);
  return {
    regressions: all.filter((f) => !explored.has(f.seed)),
    found: all.filter((f) => explored.has(f.seed)),
  };
}

/** The report of what the commit-derived seeds found, for the test log. */
export function explorationReport(found: RunSummary["failures"]): string {
  const seeds = [...new Set(found.map((f) => f.seed))];
  return `FUZZ EXPLORATION FOUND ${seeds.length} FAILING SEED(S) (${seeds.join(", ")}): a compiler bug to ` +
    `fix or list in cases/fuzz/known.ts; not a regression of the fixed range\n${describeList(found)}`;
}
