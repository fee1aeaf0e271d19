/** Fresh random feeds for a graph, shared by the tests and the benchmarks. */
import { type Graph, isFloat, numel } from "../ir/mod.ts";
import { type Rng, seededRandom } from "./random.ts";

/** Random feeds for every input and parameter: normals for floats, in-range ids for integers. */
export function randomFeeds(
  g: Graph,
  seed: number,
  ints: Record<string, (r: Rng, i: number) => number> = {},
): Record<string, Float64Array> {
  const r = seededRandom(seed);
  const feeds: Record<string, Float64Array> = {};
  for (const n of g.nodes) {
    if (n.op !== "input" && n.op !== "param") continue;
    const name = String(n.attrs.name);
    const size = numel(n.type.shape);
    const gen = ints[name];
    feeds[name] = Float64Array.from(
      { length: size },
      (_, i) => gen ? gen(r, i) : isFloat(n.type.dtype) ? r.normal() : r.int(0, 4),
    );
  }
  return feeds;
}
