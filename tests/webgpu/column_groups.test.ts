/**
 * Column sums lowered for `webgpu-gpu` (tests/util/column_sum_cases.ts: threads per column that fill the
 * device, combined in workgroup memory; a LayerNorm backward's dγ and dβ second passes as one kernel), run
 * on the test adapter against the reference interpreter on fresh random inputs. A copy of a plan whose
 * second pass skips the first part must fail the same check.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import type { Graph } from "../../ir/mod.ts";
import type { Plan } from "../../plan/plan.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { WebGPUExecutor } from "../../runtime/webgpu/webgpu_executor.ts";
import { caseProfile, columnSumCases } from "../util/column_sum_cases.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";
import { dropFirstPart } from "../util/scatter_check.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

const compile = (g: Graph, profile = PROFILES["webgpu-gpu"]) =>
  compileGraph(g, {
    fuse: true,
    target: target("wgsl", profile),
    maxBindings: gpu.ctx!.limits.maxStorageBuffersPerShaderStage,
  });

async function run(plan: Plan, feeds: Record<string, ArrayLike<number>>) {
  const ex = await WebGPUExecutor.create(gpu.ctx!, plan);
  try {
    return await ex.run(feeds);
  } finally {
    ex.destroy();
  }
}

for (const [i, c] of columnSumCases().entries()) {
  Deno.test({
    name: `column sums: ${c.name}, webgpu-gpu, on WebGPU`,
    ignore: !gpu.ctx,
    async fn() {
      const compiled = compile(c.graph, caseProfile(c, PROFILES["webgpu-gpu"]));
      assert.equal(c.expect(compiled), undefined);
      const feeds = randomFeeds(c.graph, 1300 + i);
      assertMatchesReference(
        evaluate(c.graph, feeds, { precision: "f32" }),
        await run(compiled.plan, feeds),
        {
          tol: F32_TOL,
          device: `webgpu (webgpu-gpu profile, seed ${1300 + i})`,
          plan: compiled.plan.kernels.map((k) => k.name).join(","),
        },
      );
    },
  });
}

Deno.test({
  name: "column sums: a second pass that skips a part fails the check, on WebGPU",
  ignore: !gpu.ctx,
  async fn() {
    const c = columnSumCases().find((x) => x.name.startsWith("bias gradient"))!;
    const feeds = randomFeeds(c.graph, 1400);
    const ref = evaluate(c.graph, feeds, { precision: "f32" });
    const out = await run(dropFirstPart(compile(c.graph).plan, "wgsl"), feeds);
    assert.throws(
      () =>
        assertMatchesReference(ref, out, {
          tol: F32_TOL,
          device: "webgpu (planted)",
          plan: "a part dropped",
        }),
      /db/,
    );
  },
});
