/**
 * Regression of a compiler bug the fuzzer found (seeds 28, 98, 102, 130, 139, 255, 264): a fused kernel
 * with two reductions over every axis, the second reading the first through a view (a broadcast of a
 * row-level root that another kernel reads too), put both reductions in one stage (reductionStages did not
 * look through the view), and lowering failed with "cannot compute %N reduce_sum inside a kernel at this
 * index". Its smallest form, the gradient of x·rsqrt(mean(x²) + 1), fused on the CPU backend against the
 * reference interpreter, over every axis and over proper subsets of them.
 */
import { target } from "../util/target.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { fuzzGraph } from "../../cases/fuzz/generate.ts";
import { ModelBuilder } from "../../dsl/mod.ts";
import { F32_TOL } from "../util/fused_check.ts";
import { checkCpuAgainstReference, testCpu } from "../util/cpu_check.ts";

const cpu = await testCpu();

function rmsGradient(axes: number[]) {
  const m = new ModelBuilder("rms-all-axes");
  const x = m.param("x", [2, 8, 4], "zeros");
  const y = x.mul(x.square().mean(axes).add(1).rsqrt());
  m.output("loss", y.mul(m.input("c", "f32", [2, 8, 4])).sum([0, 1, 2], false));
  return differentiate(m.graph, "loss");
}

for (const axes of [[0, 1, 2], [2], [1, 2], [0, 2]]) {
  Deno.test({
    name: `two reductions over axes [${axes}], the second through a view of the first, fused`,
    ignore: !cpu.ctx,
    fn: async () => {
      const g = rmsGradient(axes);
      await checkCpuAgainstReference(cpu.ctx!, g, randomFeeds(g, 139), { fuse: true, tol: F32_TOL });
    },
  });
}

Deno.test("the fuzz seeds of the two-stage full reductions compile fused", () => {
  for (const seed of [28, 98, 102, 130, 139, 255, 264]) {
    compileGraph(fuzzGraph(seed).graph, { fuse: true, target: target("wgsl") });
  }
});
