/**
 * The graph-level Backend of every backend that compiles (WebGPU, CUDA, …): each graph it is given is
 * compiled once (by object identity) with the row's `compile`, then run on the feeds. What differs between
 * backends is in their rows of engine/backends.ts.
 */
import { readDebugFlags } from "../compiler/pipeline/debug.ts";
import type { Graph } from "../ir/mod.ts";
import type { Plan } from "../plan/plan.ts";
import type { Backend, StepExecutor } from "../runtime/backend.ts";
import { formatProfile, type Profile } from "../runtime/profile.ts";
import type { CompiledStep } from "./backend_row.ts";

/** A compiled backend's executor: a step executor that also runs on feeds and times its launches. */
export interface RunnableExecutor extends StepExecutor {
  readonly plan: Plan;
  run(
    feeds: Record<string, ArrayLike<number>>,
    outputs?: string[],
  ): Promise<Record<string, ArrayLike<number>>>;
  profile(iterations?: number): Promise<Profile>;
}

export interface CompiledBackendOptions {
  /** "webgpu"; "-unfused" is appended when not fusing. */
  readonly name: string;
  readonly fuse?: boolean;
  /**
   * Parameters stay on the device between runs, so one is uploaded only when the caller passes a
   * different array than last time: inference calls run() per batch with the same weights, which then
   * cross PCIe once. Without it every feed is written every run.
   */
  readonly paramsStay?: boolean;
}

export function compiledBackend<Ex extends RunnableExecutor>(
  compile: (g: Graph, fuse: boolean) => Promise<CompiledStep<Ex>>,
  opts: CompiledBackendOptions,
): Backend {
  const fuse = opts.fuse !== false;
  const cache = new WeakMap<Graph, Promise<CompiledStep<Ex>>>();
  const uploaded = new WeakMap<Ex, Map<string, ArrayLike<number>>>();
  const profileLaunches = readDebugFlags().level >= 2;
  return {
    name: fuse ? opts.name : `${opts.name}-unfused`,
    async run(g, feeds, outputs) {
      let c = cache.get(g);
      if (!c) cache.set(g, c = compile(g, fuse));
      const { executor } = await c;
      let fresh = feeds;
      if (opts.paramsStay) {
        let seen = uploaded.get(executor);
        if (!seen) uploaded.set(executor, seen = new Map());
        fresh = {};
        for (const [name, data] of Object.entries(feeds)) {
          const isParam = executor.plan.params[name] !== undefined;
          if (isParam && seen.get(name) === data) continue;
          fresh[name] = data;
          if (isParam) seen.set(name, data);
        }
      }
      const result = await executor.run(fresh, outputs);
      // DEBUG=2: one line per kernel launch (time, GB/s, GFLOP/s), from a profiled re-run of the step.
      if (profileLaunches) {
        for (const line of formatProfile(await executor.profile(1))) console.error(line);
      }
      const out = new Map<string, Float32Array>();
      for (const [name, v] of Object.entries(result)) {
        out.set(name, v instanceof Float32Array ? v : Float32Array.from(v));
      }
      return out;
    },
  };
}
