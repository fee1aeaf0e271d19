/**
 * compiler/passes/scatter_column_sums.ts: a scatter-add into a table of few rows as a masked column sum. The rewritten
 * graph, run by the reference interpreter in f64, gives the scatter's table (ids out of range dropped), and
 * the rewrite applies where the profile asks for it: GPU profiles, tables up to `scatterMaskedMaxRows` rows.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { scattersAsColumnSums } from "../../compiler/passes/scatter_column_sums.ts";
import { PROFILE_NAMES, PROFILES } from "../../compiler/targets/profiles.ts";
import { scatterCases } from "../util/scatter_cases.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { scatterExpected, scatterFeeds } from "../util/scatter_check.ts";

for (const [i, c] of scatterCases().entries()) {
  Deno.test(`scatter sums: ${c.name} rewritten gives the scatter's table (f64 reference)`, () => {
    const { graph, rewritten } = scattersAsColumnSums(c.graph, c.rows);
    assert.equal(rewritten, 1);
    assert.ok(!graph.nodes.some((n) => n.op === "scatter_add"));
    const feeds = scatterFeeds(c, 900 + i);
    const want = scatterExpected(c, feeds, "f64");
    const got = evaluate(graph, feeds, { precision: "f64" });
    for (const name of ["upd", "table"]) {
      const a = got.get(name)!, b = want.get(name)!;
      assert.equal(a.length, b.length, name);
      let worst = 0, scale = 0;
      for (let j = 0; j < a.length; j++) {
        worst = Math.max(worst, Math.abs(a[j] - b[j]));
        scale = Math.max(scale, Math.abs(b[j]));
      }
      // Both in f64: only the order of the additions differs.
      assert.ok(scale > 0 && worst <= 1e-12 * scale, `${name}: ${worst} off (max ${scale})`);
    }
  });
}

Deno.test("scatter sums: a table over the bound keeps its scatter", () => {
  const c = scatterCases().find((x) => x.parts && x.rows > 2)!;
  const r = scattersAsColumnSums(c.graph, c.rows - 1);
  assert.equal(r.rewritten, 0);
  assert.equal(r.graph, c.graph);
});

Deno.test("scatter sums: GPU profiles rewrite tables up to scatterMaskedMaxRows rows; lavapipe and cpu keep the scatter", () => {
  const c = scatterCases()[1];
  for (const name of PROFILE_NAMES) {
    const p = PROFILES[name];
    const kinds = (rows: number) =>
      compileGraph(c.graph, { fuse: true, target: target("wgsl", { ...p, scatterMaskedMaxRows: rows }) })
        .kernels.map((k) => k.kind);
    const gpu = name === "webgpu-gpu" || name === "cuda-sm90";
    assert.equal(p.scatterMaskedMaxRows >= c.rows, gpu, `${name}: ${p.scatterMaskedMaxRows}`);
    assert.equal(kinds(p.scatterMaskedMaxRows).includes("scatter"), !gpu, name);
    assert.ok(kinds(c.rows - 1).includes("scatter"), `${name}: a table past the bound`);
  }
});
