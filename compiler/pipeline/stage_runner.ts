/**
 * The pass pipeline: runs the compile's stages in order — graph-to-graph passes, then the kernel-level
 * stages (compiler/stages/) — with the same hooks at every stage: a check after each one (so a broken
 * invariant is blamed on the stage that broke it, not on a later one that trips over it), numbered text
 * dumps into DUMP_DIR (one sequence across both levels), SKIP_PASSES, DEBUG=1 timings and DEBUG=5
 * listings. `runStages` is the runner; a `StageLevel` says how its state is printed and checked;
 * `runPipeline` is the runner at the graph level.
 */
import { assertValidGraph, type Graph, printGraph } from "../../ir/mod.ts";
import { DebugFlagError, type DebugFlags, debugLog, Fuel, QUIET, readDebugFlags } from "./debug.ts";

export interface PassContext {
  readonly flags: DebugFlags;
  /** The fusion budget (FUSION_FUEL); passes other than fusion leave it alone. */
  readonly fuel: Fuel;
  /**
   * Logs `msg` (to stderr) when the debug level is at least `level`. Passes that build long messages
   * check `flags.level` first.
   */
  log(level: number, msg: string): void;
}

export interface Pass {
  /** Used by SKIP_PASSES, dumps, timings and error messages. */
  readonly name: string;
  /**
   * Returns the same Graph object when nothing changed and a new Graph when something did; never
   * mutates its argument (the pipeline keeps it for dumps and error reports).
   */
  run(g: Graph, ctx: PassContext): Graph;
}

/**
 * A stage of the compile over a state of type S. `run` returns a new state (the same object when nothing
 * changed) and never mutates its argument, which the runner keeps for dumps and error reports.
 */
export interface Stage<S> {
  /** Used by SKIP_PASSES, dumps, timings and error messages. */
  readonly name: string;
  /** One line for compiler/README.md: what the stage does. */
  readonly about?: string;
  run(s: S, ctx: PassContext): S;
  /**
   * What the stage leaves when SKIP_PASSES names it; absent when skipping it is not meaningful (a later
   * stage needs what it makes), so that naming it is an error.
   */
  skip?(s: S, ctx: PassContext): S;
}

/** How the states of one level are printed and checked. */
export interface StageLevel<S> {
  /** The dump files' extension. */
  readonly ext: string;
  /** What DEBUG=5 calls a listing ("IR", "kernels"). */
  readonly noun: string;
  /** What the DEBUG=1 total line calls a run ("pipeline", "kernel stages"). */
  readonly label: string;
  /** Whether a dump is also written before each stage (graph passes: yes; kernel stages: the previous stage's dump is that). */
  readonly dumpBefore: boolean;
  print(s: S): string;
  /** A cheap fingerprint taken before each stage runs, given to `check` (to catch a stage mutating its input). */
  fingerprint?(s: S): number;
  /** Throws (an Error whose message is the whole report) when the state a stage left is invalid. */
  check(before: S, after: S, stage: string, fingerprint?: number): void;
  /** Throws when the state given to the runner is invalid. */
  checkInput?(s: S): void;
  /** The DEBUG=1 line's account of what a stage changed. */
  summary(before: S, after: S): string;
}

/** A stage's name and whether SKIP_PASSES may name it. */
export interface StageInfo {
  readonly name: string;
  readonly skippable: boolean;
}

export const stageInfo = <S>(s: Stage<S>): StageInfo => ({ name: s.name, skippable: s.skip !== undefined });

export interface StageRecord<S> {
  readonly pass: string;
  readonly ms: number;
  readonly skipped: boolean;
  readonly before: S;
  readonly after: S;
}

export interface PassTiming {
  readonly pass: string;
  readonly ms: number;
  readonly changed: boolean;
  readonly skipped: boolean;
  readonly nodesBefore: number;
  readonly nodesAfter: number;
}

export interface PipelineResult {
  readonly graph: Graph;
  readonly timings: PassTiming[];
}

export interface PipelineOptions {
  /**
   * Every pass name the driver knows, when it runs its passes in more than one pipeline; SKIP_PASSES
   * names outside this list are an error. Default: the names of the passes given to this run.
   */
  readonly knownPasses?: readonly string[];
  /** Like knownPasses, saying which may be skipped (this wins over knownPasses). */
  readonly stages?: readonly StageInfo[];
}

/** A stage failed or left an invalid state; the message names the stage. */
export class PassError extends Error {
  constructor(readonly pass: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "PassError";
  }
}

// Dumps are numbered across every pipeline run that shares a context, so a driver that runs several
// pipelines gets one ordered sequence of files.
const dumpCounters = new WeakMap<PassContext, number>();

/**
 * A context from explicit flags, or from the environment when none are given. A driver that also runs
 * fusion outside the pipeline passes its own Fuel so that both spend one budget.
 */
export function makePassContext(
  flags: DebugFlags = readDebugFlags(),
  fuel = new Fuel(flags.fusionFuel),
): PassContext {
  return { flags, fuel, log: (level, msg) => debugLog(flags, level, msg) };
}

/** A quiet context (no logging, dumps or skips), for tests and library callers. */
export function quietContext(): PassContext {
  return makePassContext(QUIET);
}

/**
 * A misspelt pass name would silently skip nothing, and a stage that cannot be skipped would leave later
 * stages without what they need: both are the user's mistake, so a DebugFlagError.
 */
export function checkSkips(flags: DebugFlags, known: readonly StageInfo[]): void {
  const names = known.map((k) => k.name);
  const unknown = [...flags.skipPasses].filter((s) => !names.includes(s));
  if (unknown.length) {
    throw new DebugFlagError(
      `SKIP_PASSES names ${unknown.map((s) => `'${s}'`).join(", ")}, which ${
        unknown.length > 1 ? "are not passes" : "is not a pass"
      }; the passes are: ${names.join(", ")}`,
    );
  }
  const fixed = [...flags.skipPasses].filter((s) => !known.some((k) => k.name === s && k.skippable));
  if (fixed.length) {
    throw new DebugFlagError(
      `SKIP_PASSES names ${
        fixed.map((s) => `'${s}'`).join(", ")
      }, which cannot be skipped; the passes that can: ${
        known.filter((k) => k.skippable).map((k) => k.name).join(", ")
      }`,
    );
  }
}

function dump<S>(ctx: PassContext, level: StageLevel<S>, when: string, stage: string, s: S, seq: number) {
  const dir = ctx.flags.dumpDir;
  if (dir === undefined) return;
  Deno.mkdirSync(dir, { recursive: true });
  const file = `${String(seq).padStart(2, "0")}-${when}-${
    stage.replace(/[^A-Za-z0-9_.-]/g, "_")
  }.${level.ext}`;
  Deno.writeTextFileSync(`${dir.replace(/\/+$/, "")}/${file}`, level.print(s));
}

/**
 * Runs `stages` over `initial` in order, with the hooks: SKIP_PASSES (checked against `known`, default
 * the stages given), a check after every stage that ran (a failure is a PassError naming the stage, and
 * the state it left is dumped for inspection), DUMP_DIR dumps, DEBUG=1 timings, DEBUG=5 listings.
 */
export function runStages<S>(
  initial: S,
  stages: readonly Stage<S>[],
  level: StageLevel<S>,
  ctx: PassContext,
  known: readonly StageInfo[] = stages.map(stageInfo),
): { state: S; records: StageRecord<S>[] } {
  checkSkips(ctx.flags, known);
  level.checkInput?.(initial);
  const records: StageRecord<S>[] = [];
  const total0 = performance.now();
  let cur = initial;
  for (const stage of stages) {
    if (stage.skip && ctx.flags.skipPasses.has(stage.name)) {
      ctx.log(1, `[pass] ${stage.name}: skipped (SKIP_PASSES)`);
      const after = stage.skip(cur, ctx);
      records.push({ pass: stage.name, ms: 0, skipped: true, before: cur, after });
      cur = after;
      continue;
    }
    const seq = (dumpCounters.get(ctx) ?? 0) + 1;
    dumpCounters.set(ctx, seq);
    if (level.dumpBefore) dump(ctx, level, "before", stage.name, cur, seq);
    const fingerprint = level.fingerprint?.(cur);
    const t0 = performance.now();
    let next: S;
    try {
      next = stage.run(cur, ctx);
    } catch (e) {
      if (e instanceof PassError) throw e;
      const msg = e instanceof Error ? e.message : String(e);
      throw new PassError(stage.name, `pass '${stage.name}' failed: ${msg}`, { cause: e });
    }
    const ms = performance.now() - t0;
    try {
      level.check(cur, next, stage.name, fingerprint);
    } catch (e) {
      if (!(e instanceof Error) || e instanceof PassError) throw e;
      dump(ctx, level, "after", stage.name, next, seq); // the broken state is what one wants to look at
      throw new PassError(stage.name, e.message, { cause: e });
    }
    dump(ctx, level, "after", stage.name, next, seq);
    records.push({ pass: stage.name, ms, skipped: false, before: cur, after: next });
    ctx.log(1, `[pass] ${stage.name}: ${ms.toFixed(1)} ms, ${level.summary(cur, next)}`);
    if (ctx.flags.level >= 5) ctx.log(5, `[pass] ${level.noun} after ${stage.name}:\n${level.print(next)}`);
    cur = next;
  }
  ctx.log(1, `[pass] ${level.label}: ${(performance.now() - total0).toFixed(1)} ms`);
  return { state: cur, records };
}

/** The graph level: IR text dumps (before and after), the verifier after every pass that changed the graph. */
export const GRAPH_LEVEL: StageLevel<Graph> = {
  ext: "ir",
  noun: "IR",
  label: "pipeline",
  dumpBefore: true,
  print: printGraph,
  fingerprint: (g) => g.nodes.length,
  check(before, after, pass, nodesBefore) {
    if (after.precision !== before.precision) {
      throw new Error(
        `pass '${pass}' changed the graph's precision from ${before.precision} to ${after.precision}`,
      );
    }
    if (after !== before) return assertValidGraph(after, `after pass '${pass}'`);
    if (after.nodes.length !== nodesBefore) {
      throw new Error(`pass '${pass}' modified its input graph in place`);
    }
  },
  checkInput: (g) => assertValidGraph(g, "pipeline input"),
  summary: (before, after) =>
    after !== before
      ? `${before.nodes.length} -> ${after.nodes.length} nodes`
      : `unchanged (${before.nodes.length} nodes)`,
};

/**
 * Runs graph `passes` over `g` in order. The input graph is checked first; after each pass that returned
 * a new graph, the result is checked and an invalid one is a PassError naming the pass.
 */
export function runPipeline(
  g: Graph,
  passes: readonly Pass[],
  ctx: PassContext = makePassContext(),
  opts: PipelineOptions = {},
): PipelineResult {
  const stages = passes.map((p): Stage<Graph> => ({
    name: p.name,
    run: (h, c) => p.run(h, c),
    skip: (h) => h,
  }));
  const known = opts.stages ??
    (opts.knownPasses ?? passes.map((p) => p.name)).map((name) => ({ name, skippable: true }));
  const { state, records } = runStages(g, stages, GRAPH_LEVEL, ctx, known);
  const timings = records.map((r) => ({
    pass: r.pass,
    ms: r.ms,
    changed: r.after !== r.before,
    skipped: r.skipped,
    nodesBefore: r.before.nodes.length,
    nodesAfter: r.after.nodes.length,
  }));
  return { graph: state, timings };
}
