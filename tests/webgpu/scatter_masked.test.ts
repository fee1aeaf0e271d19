/**
 * Scatter-adds into tables of few rows lowered for `webgpu-gpu`, where they become masked column sums in
 * parts (compiler/passes/scatter_column_sums.ts), run on the test adapter against the reference interpreter on fresh
 * random inputs: tables of one, two and five rows, a share of the ids out of range (dropped), and the
 * elementwise updates still stored. A copy of the plan whose second pass skips the first part must fail
 * the same check.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { type ScatterCase, scatterCases } from "../util/scatter_cases.ts";
import type { Plan } from "../../plan/plan.ts";
import { WebGPUExecutor } from "../../runtime/webgpu/webgpu_executor.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";
import { dropFirstPart, scatterExpected, scatterFeeds } from "../util/scatter_check.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

function compiled(c: ScatterCase): Plan {
  return compileGraph(c.graph, {
    fuse: true,
    target: target("wgsl", PROFILES["webgpu-gpu"]),
    maxBindings: gpu.ctx!.limits.maxStorageBuffersPerShaderStage,
  }).plan;
}

async function run(plan: Plan, feeds: Record<string, Float64Array>) {
  const ex = await WebGPUExecutor.create(gpu.ctx!, plan);
  try {
    return await ex.run(feeds);
  } finally {
    ex.destroy();
  }
}

for (const [i, c] of scatterCases().entries()) {
  Deno.test({
    name: `scatter as a masked column sum: ${c.name}, webgpu-gpu, on WebGPU`,
    ignore: !gpu.ctx,
    async fn() {
      const plan = compiled(c);
      assert.ok(!plan.kernels.some((k) => k.kind === "scatter"), "still a scatter kernel");
      const seed = 700 + i;
      const feeds = scatterFeeds(c, seed);
      assertMatchesReference(scatterExpected(c, feeds), await run(plan, feeds), {
        tol: F32_TOL,
        device: `webgpu (webgpu-gpu profile, seed ${seed})`,
        plan: `${plan.kernels.length} kernels: ${plan.kernels.map((k) => k.name)}`,
      });
    },
  });
}

Deno.test({
  name: "scatter as a masked column sum: a second pass that skips a part fails the check, on WebGPU",
  ignore: !gpu.ctx,
  async fn() {
    const c = scatterCases().find((x) => x.parts && x.rows > 2)!;
    const feeds = scatterFeeds(c, 800);
    const out = await run(dropFirstPart(compiled(c), "wgsl"), feeds);
    assert.throws(
      () =>
        assertMatchesReference(scatterExpected(c, feeds), out, {
          tol: F32_TOL,
          device: "webgpu (planted)",
          plan: "a part dropped",
        }),
      /table:/,
    );
  },
});
