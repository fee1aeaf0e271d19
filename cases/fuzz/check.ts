/**
 * One fuzz batch on one device: the union of the seeds' graphs (batch.ts) compiled fused or unfused for
 * the device's target, run once, and every element of every output compared with the f64 reference
 * interpreter on the original graph, within the bound the tolerance model (bound.ts) derives for the
 * plan that ran: the bounds are propagated through the graph the plan executes (after simplification),
 * with the f16 roundings its storage plan chose. A crash while compiling or running fails every graph of
 * the batch; an element is left unchecked only where its bound is infinite (a NaN the device might
 * legitimately produce), and those are counted.
 */
import type { Target } from "../../compiler/targets/target.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { withLowCopyFeeds } from "../../plan/low_copies.ts";
import type { Plan } from "../../plan/plan.ts";
import { evaluate, evaluateNodes } from "../../runtime/reference/interpreter.ts";
import { batchOf } from "./batch.ts";
import { errorBounds } from "./bound.ts";
import { fuzzGraph } from "./generate.ts";

/** A device the fuzzer runs plans on: the target it needs and a way to run a plan once. */
export interface FuzzDevice {
  readonly name: string;
  /** What the fuzzer compiles for it (lavapipe's knobs in the device's language: serial rows). */
  readonly target: Target;
  /** Flags `deno task fuzz` needs to pick this device's variant (e.g. --template-gemms). */
  readonly flags?: string;
  run(plan: Plan, feeds: Record<string, ArrayLike<number>>): Promise<ReadonlyMap<string, ArrayLike<number>>>;
}

export interface Failure {
  readonly seed: number;
  readonly output: string;
  /** The first element out of bounds (-1: the batch did not compile or run). */
  readonly index: number;
  readonly got: number;
  readonly want: number;
  readonly bound: number;
  readonly message: string;
}

export interface GraphVerdict {
  readonly seed: number;
  readonly checked: number;
  readonly unchecked: number;
  /** Elements whose bound is within 1% of their output's largest reference value (how sharp the check). */
  readonly sharp: number;
  readonly failures: readonly Failure[];
}

export interface BatchReport {
  readonly device: string;
  readonly fuse: boolean;
  readonly kernels: number;
  readonly verdicts: readonly GraphVerdict[];
  readonly ms: {
    readonly build: number;
    readonly compile: number;
    readonly run: number;
    readonly check: number;
  };
}

/** Values within this of each other are equal (a device may flush subnormals; the bound may be 0). */
const FLOOR = 1e-30;

export async function checkBatch(
  seeds: readonly number[],
  fuse: boolean,
  dev: FuzzDevice,
): Promise<BatchReport> {
  let t = performance.now();
  const lap = () => {
    const now = performance.now(), ms = now - t;
    t = now;
    return ms;
  };
  const parts = seeds.map(fuzzGraph);
  const batch = batchOf(parts);
  const ms = { build: lap(), compile: 0, run: 0, check: 0 };
  const crash = (what: string, e: unknown): BatchReport => ({
    device: dev.name,
    fuse,
    kernels: 0,
    verdicts: seeds.map((seed) => ({
      seed,
      checked: 0,
      unchecked: 0,
      sharp: 0,
      failures: [{ seed, output: "", index: -1, got: NaN, want: NaN, bound: 0, message: `${what}: ${e}` }],
    })),
    ms,
  });
  const compile = (g: typeof batch.graph) => compileGraph(g, { fuse, target: dev.target });
  let compiled;
  try {
    compiled = compile(batch.graph);
  } catch (e) {
    // One graph that does not compile must not cost the batch: find it alone, check the others.
    const culprits = new Map<number, unknown>();
    for (const p of parts) {
      try {
        compile(p.graph);
      } catch (alone) {
        culprits.set(p.seed, alone);
      }
    }
    if (culprits.size === 0 || culprits.size === seeds.length) return crash("compile failed", e);
    const rest = await checkBatch(seeds.filter((s) => !culprits.has(s)), fuse, dev);
    const failed = [...culprits].map(([seed, err]) =>
      crash("compile failed", err).verdicts[seeds.indexOf(seed)]
    );
    return { ...rest, verdicts: [...rest.verdicts, ...failed] };
  }
  ms.compile = lap();
  let got;
  try {
    got = await dev.run(compiled.plan, batch.feeds);
  } catch (e) {
    return crash(`${dev.name} run failed`, e);
  }
  ms.run = lap();

  const want = evaluate(batch.graph, batch.feeds, { precision: "f64" });
  const g = compiled.graph;
  // The plan's graph may read weight copies the runtime derives from the weights (plan/low_copies.ts).
  const vals = evaluateNodes(
    g,
    withLowCopyFeeds(compiled.plan, batch.feeds),
    g.nodes.map((n) => n.id),
    "f64",
  );
  const bounds = errorBounds(g, vals, { narrowed: compiled.storage.narrowed });
  const verdicts = new Map(
    seeds.map((seed) => [seed, { seed, checked: 0, unchecked: 0, sharp: 0, failures: [] as Failure[] }]),
  );
  for (const [name, ref] of want) {
    if (batch.skip.has(name)) continue;
    const { seed, name: local } = batch.owner.get(name)!;
    const v = verdicts.get(seed)!;
    const out = got.get(name), bound = bounds[g.outputs.get(name)!];
    const fail = (index: number, message: string) =>
      v.failures.push({
        seed,
        output: local,
        index,
        got: out?.[index] ?? NaN,
        want: ref[index],
        bound: bound?.[index] ?? 0,
        message,
      });
    if (!out || out.length !== ref.length || !bound) {
      fail(-1, `output ${local}: ${out ? `${out.length} values for ${ref.length}` : "missing"}`);
      continue;
    }
    let scale = 0;
    for (const x of ref) if (Number.isFinite(x)) scale = Math.max(scale, Math.abs(x));
    for (let i = 0; i < ref.length; i++) {
      const b = bound[i], w = ref[i], x = out[i];
      if (!Number.isFinite(w)) {
        // A non-finite reference must come out the same (the generator keeps values finite), unless its
        // bound is not finite either: the reference rounds an f16 node after every op, so a value past
        // f16's range is ∞ there (and 0·∞ NaN downstream) while a fused kernel may keep it in f32 and
        // stay finite (seed 165904022: LayerNorm backward of a constant row, rsqrt(eps)/eps ≈ 3e7).
        if (!Number.isFinite(b)) {
          v.unchecked++;
          continue;
        }
        if (!Object.is(w, x) && !(Number.isNaN(w) && Number.isNaN(x))) {
          fail(i, `${local}[${i}]: ${x}, reference ${w}`);
        }
        v.checked++;
        continue;
      }
      if (!Number.isFinite(b)) {
        v.unchecked++;
        continue;
      }
      v.checked++;
      if (b <= 0.01 * scale) v.sharp++;
      if (!(Math.abs(x - w) <= b + FLOOR)) {
        fail(
          i,
          `${local}[${i}] = ${x}, reference ${w}: |error| ${Math.abs(x - w).toExponential(3)} > bound ${
            b.toExponential(3)
          }`,
        );
      }
    }
  }
  ms.check = lap();
  return {
    device: dev.name,
    fuse,
    kernels: compiled.plan.kernels.length,
    verdicts: [...verdicts.values()],
    ms,
  };
}

/** The one-line command that replays a seed (alone, then as part of the batch it failed in). */
export function replayCommand(
  seed: number,
  dev: FuzzDevice,
  fuse: boolean,
  batch?: { first: number; count: number },
): string {
  const device = dev.name;
  const mode = (fuse ? "--fused" : "--unfused") + (dev.flags ? ` ${dev.flags}` : "");
  const alone = `deno task fuzz --seed ${seed} --count 1 --backend ${device} ${mode}`;
  return batch && batch.count > 1
    ? `${alone}   (as run, in its batch: deno task fuzz --seed ${batch.first} --count ${batch.count} --batch ${batch.count} --backend ${device} ${mode})`
    : alone;
}
