/**
 * Feeds and expected outputs for the scatter cases (tests/util/scatter_cases.ts), shared by the CUDA-shim and
 * WebGPU tests of scatter-adds lowered as masked column sums.
 */
import assert from "node:assert/strict";
import { type ScatterCase, widenedOracle } from "./scatter_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import type { Plan } from "../../plan/plan.ts";

/** Random feeds for `c`, with some ids out of the table's range (and some in it). */
export function scatterFeeds(c: ScatterCase, seed: number): Record<string, Float64Array> {
  const feeds = randomFeeds(c.graph, seed, { ids: c.ids });
  const outside = feeds.ids.filter((v) => v < 0 || v >= c.rows).length;
  assert.ok(outside > 0 && outside < feeds.ids.length, `seed ${seed}: ${outside} ids out of range`);
  return feeds;
}

/** The reference's updates, and its table with out-of-range ids dropped (widenedOracle). */
export function scatterExpected(
  c: ScatterCase,
  feeds: Record<string, Float64Array>,
  precision: "f32" | "f64" = "f32",
): Map<string, ArrayLike<number>> {
  const o = widenedOracle(c, feeds);
  const ref = evaluate(o.graph, o.feeds, { precision });
  return new Map<string, ArrayLike<number>>([["upd", ref.get("upd")!], [
    "table",
    o.table(ref.get("table")!),
  ]]);
}

/**
 * A planted error: `plan` with the second pass of its masked column sum (the reduce kernel reading what
 * another reduce kernel wrote: the parts' sums) skipping the first part: its loop over the parts starts at
 * 1 where a thread walks them all, and the first group of threads starts a stride later where the parts
 * are shared among groups (lower_kernel.ts columnGroups).
 */
export function dropFirstPart(plan: Plan, target: "cuda" | "wgsl"): Plan {
  const partsOut = plan.kernels.filter((k) => k.kind === "reduce")
    .flatMap((k) => k.bindings.filter((b) => b.access === "write")).map((b) => b.buffer);
  const second = plan.kernels.findIndex((k) =>
    k.kind === "reduce" && k.bindings.some((b) => b.access === "read" && partsOut.includes(b.buffer))
  );
  assert.ok(second >= 0, `no second pass among ${plan.kernels.map((k) => k.name)}`);
  const k = plan.kernels[second];
  const source = k.source;
  const code = source.code.replace(/for \((int j|var j: i32) = 0;/, "for ($1 = 1;").replace(
    /for \((int j|var j: i32) = grp; (j < \d+); j \+= (\d+)\)/,
    (_, decl, test, stride) =>
      `for (${decl} = grp + ${
        target === "cuda" ? `(grp == 0 ? ${stride} : 0)` : `select(0, ${stride}, grp == 0)`
      }; ${test}; j += ${stride})`,
  );
  assert.notEqual(code, source.code, `no loop over the parts in ${k.name}:\n${source.code}`);
  return {
    ...plan,
    kernels: plan.kernels.map((x, j) => (j === second ? { ...x, source: { ...source, code } } : x)),
  };
}
