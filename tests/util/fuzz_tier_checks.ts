/** What every fuzz tier asserts of its run (cases/fuzz/ci.ts fuzzTier). */
import assert from "node:assert/strict";
import type { TierResult } from "../../cases/fuzz/ci.ts";
import { describeList } from "../../cases/fuzz/run.ts";

/** No failure in the fixed range, every graph run, and few fixed seeds that compared nothing. */
export function assertTierClean(r: TierResult, fixed: number): void {
  assert.equal(r.regressions.length, 0, `fuzz failures in the fixed range:\n${describeList(r.regressions)}`);
  assert.equal(r.graphs, r.expected);
  // A graph whose every output is unbounded checks nothing; a few are the price of honest bounds, many
  // would mean the bound model (cases/fuzz/bound.ts) or the generator stopped checking.
  assert.ok(
    r.uncomparedFixed.length <= fixed / 100,
    `fixed seeds that compared nothing: ${r.uncomparedFixed}`,
  );
}
