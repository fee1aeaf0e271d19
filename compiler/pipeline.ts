/**
 * The pass pipeline: runs graph-to-graph passes in order, checks the graph after every pass that changed
 * it (so a broken invariant is blamed on the pass that broke it, not on a later one that trips over it),
 * and implements the debugging flags that concern passes: DUMP_DIR, SKIP_PASSES, DEBUG=1 timings and
 * DEBUG=5 IR listings.
 */
import { assertValidGraph, type Graph, IRError, printGraph } from "../ir/mod.ts";
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
}

/** A pass failed or left an invalid graph; the message names the pass. */
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

/** A misspelt pass name would silently skip nothing; it is the user's mistake, so a DebugFlagError. */
function checkSkips(flags: DebugFlags, known: readonly string[]): void {
  const unknown = [...flags.skipPasses].filter((s) => !known.includes(s));
  if (unknown.length) {
    throw new DebugFlagError(
      `SKIP_PASSES names ${unknown.map((s) => `'${s}'`).join(", ")}, which ${
        unknown.length > 1 ? "are not passes" : "is not a pass"
      }; the passes are: ${known.join(", ")}`,
    );
  }
}

function dump(ctx: PassContext, when: "before" | "after", pass: string, g: Graph, seq: number): void {
  const dir = ctx.flags.dumpDir;
  if (dir === undefined) return;
  Deno.mkdirSync(dir, { recursive: true });
  const file = `${String(seq).padStart(2, "0")}-${when}-${pass.replace(/[^A-Za-z0-9_.-]/g, "_")}.ir`;
  Deno.writeTextFileSync(`${dir.replace(/\/+$/, "")}/${file}`, printGraph(g));
}

/**
 * Runs `passes` over `g` in order. The input graph is checked first; after each pass that returned a new
 * graph, the result is checked and an invalid one is a PassError naming the pass.
 */
export function runPipeline(
  g: Graph,
  passes: readonly Pass[],
  ctx: PassContext = makePassContext(),
  opts: PipelineOptions = {},
): PipelineResult {
  const names = passes.map((p) => p.name);
  checkSkips(ctx.flags, opts.knownPasses ?? names);
  assertValidGraph(g, "pipeline input");
  const timings: PassTiming[] = [];
  const total0 = performance.now();
  let cur = g;
  for (const pass of passes) {
    const nodesBefore = cur.nodes.length;
    if (ctx.flags.skipPasses.has(pass.name)) {
      ctx.log(1, `[pass] ${pass.name}: skipped (SKIP_PASSES)`);
      timings.push({
        pass: pass.name,
        ms: 0,
        changed: false,
        skipped: true,
        nodesBefore,
        nodesAfter: nodesBefore,
      });
      continue;
    }
    const seq = (dumpCounters.get(ctx) ?? 0) + 1;
    dumpCounters.set(ctx, seq);
    dump(ctx, "before", pass.name, cur, seq);
    const t0 = performance.now();
    let next: Graph;
    try {
      next = pass.run(cur, ctx);
    } catch (e) {
      if (e instanceof PassError) throw e;
      const msg = e instanceof Error ? e.message : String(e);
      throw new PassError(pass.name, `pass '${pass.name}' failed: ${msg}`, { cause: e });
    }
    const ms = performance.now() - t0;
    const changed = next !== cur;
    if (!changed && next.nodes.length !== nodesBefore) {
      throw new PassError(pass.name, `pass '${pass.name}' modified its input graph in place`);
    }
    if (changed) {
      try {
        assertValidGraph(next, `after pass '${pass.name}'`);
      } catch (e) {
        if (!(e instanceof IRError)) throw e;
        dump(ctx, "after", pass.name, next, seq); // the broken graph is what one wants to look at
        throw new PassError(pass.name, e.message, { cause: e });
      }
    }
    dump(ctx, "after", pass.name, next, seq);
    timings.push({
      pass: pass.name,
      ms,
      changed,
      skipped: false,
      nodesBefore,
      nodesAfter: next.nodes.length,
    });
    ctx.log(
      1,
      `[pass] ${pass.name}: ${ms.toFixed(1)} ms, ${
        changed ? `${nodesBefore} -> ${next.nodes.length} nodes` : `unchanged (${nodesBefore} nodes)`
      }`,
    );
    if (ctx.flags.level >= 5) ctx.log(5, `[pass] IR after ${pass.name}:\n${printGraph(next)}`);
    cur = next;
  }
  ctx.log(1, `[pass] pipeline: ${(performance.now() - total0).toFixed(1)} ms`);
  return { graph: cur, timings };
}
