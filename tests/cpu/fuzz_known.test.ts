/**
 * The fuzzer's list of unfixed compiler bugs (cases/fuzz/known.ts) stays true: each listed seed still
 * fails to compile fused with its bug's message, and compiles unfused. When a fix lands this test fails
 * for its seeds: remove the entry, and the seeds are checked like all others again.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { fuzzGraph } from "../../cases/fuzz/generate.ts";
import { KNOWN_BUGS } from "../../cases/fuzz/known.ts";

// Compile failures only: a wrong result needs a device (the fuzz tests report it while it lasts).
for (const bug of KNOWN_BUGS.filter((b) => !b.onlyTheseSeeds)) {
  Deno.test(`known fuzz bug still there: ${bug.what.slice(0, 80)}…`, () => {
    for (const seed of bug.seeds) {
      const g = fuzzGraph(seed).graph;
      assert.throws(
        () => compileGraph(g, { fuse: true, target: target("wgsl") }),
        (e: Error) => bug.pattern.test(e.message),
        `seed ${seed} compiles fused now: remove it (or its bug) from cases/fuzz/known.ts`,
      );
      compileGraph(g, { fuse: false, target: target("wgsl") });
    }
  });
}
