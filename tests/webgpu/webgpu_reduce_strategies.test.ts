/**
 * The three ways a reduce kernel is laid out — one workgroup per row (few long rows), one thread per row
 * (many rows), and columns split over several threads (long column sums) — each against the reference
 * interpreter on WebGPU, with two reduction stages (a mean, then a variance of centred values) and
 * element-level and row-level outputs, the shape of LayerNorm and of a bias gradient.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { ModelBuilder } from "../../dsl/mod.ts";
import { checkAgainstReference, F32_TOL } from "../util/fused_check.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

/** Normalizes x over `axis` (two stages) and also returns the sum of squares (a row-level output). */
function normalizeGraph(shape: number[], axis: number) {
  const m = new ModelBuilder(`norm-${shape.join("x")}-axis${axis}`);
  const x = m.input("x", "f32", shape);
  const centred = x.sub(x.mean(axis));
  const y = centred.mul(centred.square().mean(axis).add(1e-5).rsqrt());
  m.output("y", y.mul(m.input("scale", "f32", shape)));
  m.output("sumsq", x.square().sum(axis));
  return m.graph;
}

const CASES = [
  { name: "few long rows: a workgroup per row", shape: [4, 3000], axis: 1, threads: 256, groups: 4 },
  { name: "many rows: a thread per row", shape: [600, 48], axis: 1, threads: 256, groups: 3 },
  { name: "long columns: split over 16 threads each", shape: [700, 40], axis: 0, threads: 256, groups: 3 },
];

for (const c of CASES) {
  Deno.test({
    name: `reduce layout (${c.name}) matches the reference`,
    ignore: !gpu.ctx,
    fn: async () => {
      const g = normalizeGraph(c.shape, c.axis);
      const compiled = compileGraph(g, { fuse: true, target: target("wgsl") });
      const reduce = compiled.plan.kernels.filter((k) => k.kind === "reduce");
      assert.equal(reduce.length, 1, "one reduce kernel writes both outputs");
      assert.equal(reduce[0].source!.workgroupSize, c.threads);
      assert.equal(reduce[0].source!.grid[0], c.groups, `${reduce[0].name} grid`);
      await checkAgainstReference(gpu.ctx!, g, randomFeeds(g, 5), { fuse: true, tol: F32_TOL });
    },
  });
}
