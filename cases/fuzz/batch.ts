/**
 * Many fuzz graphs as one: their disjoint union, every input, parameter and output name prefixed with
 * the graph's seed (`s1234.`), so one compile, one plan and one launch sequence check them all. An update
 * output keeps its prefix in front (`new:s1234.opt.m`), so the plan still copies it back into its input.
 * The graphs share nothing but equal constants (which CSE may merge, and fusion may then join).
 */
import { Graph, type NodeId } from "../../ir/mod.ts";
import { UPDATE_PREFIX } from "../../plan/plan.ts";
import type { FuzzGraph } from "./generate.ts";

export interface Batch {
  readonly graph: Graph;
  readonly feeds: Record<string, Float64Array>;
  /** Each output of the union: the seed of the graph it belongs to and its name there. */
  readonly owner: ReadonlyMap<string, { seed: number; name: string }>;
  /** Outputs not compared (FuzzGraph.skip, renamed). */
  readonly skip: ReadonlySet<string>;
}

export const prefixOf = (seed: number) => `s${seed}.`;

/** A name of graph `seed` as the union spells it. */
export function renamed(seed: number, name: string): string {
  return name.startsWith(UPDATE_PREFIX)
    ? UPDATE_PREFIX + prefixOf(seed) + name.slice(UPDATE_PREFIX.length)
    : prefixOf(seed) + name;
}

export function batchOf(parts: readonly FuzzGraph[]): Batch {
  // Mixed-precision parts are all fp16: the union is, so the storage policy narrows their values as
  // it would each alone (fp32 parts have no casts for it to act on).
  const precision = parts.some((p) => p.graph.precision !== "fp32") ? "fp16" : "fp32";
  const g = new Graph(`fuzz-${parts[0]?.seed}-x${parts.length}`, precision);
  const feeds: Record<string, Float64Array> = {};
  const owner = new Map<string, { seed: number; name: string }>();
  const skip = new Set<string>();
  for (const p of parts) {
    const map: NodeId[] = [];
    for (const n of p.graph.nodes) {
      const source = n.op === "input" || n.op === "param";
      const attrs = source ? { ...n.attrs, name: renamed(p.seed, String(n.attrs.name)) } : n.attrs;
      map[n.id] = g.add(n.op, n.inputs.map((i) => map[i]), attrs, n.type, n.loc);
    }
    for (const [name, id] of p.graph.outputs) {
      const full = renamed(p.seed, name);
      g.setOutput(full, map[id]);
      owner.set(full, { seed: p.seed, name });
      if (p.skip.includes(name)) skip.add(full);
    }
    for (const [name, values] of Object.entries(p.feeds)) feeds[renamed(p.seed, name)] = values;
  }
  return { graph: g, feeds, owner, skip };
}
