/**
 * Every fused-kernel kind against the reference interpreter on WebGPU (lavapipe in CI), in f32 and with
 * f16 storage, on fresh random inputs: loop fusion through broadcasts, LayerNorm forward and backward,
 * masked softmax + dropout forward and backward, cross-entropy forward and backward, bias-gradient
 * column sums, GEMM epilogues, batched GEMMs through permutes, gather and scatter-add. Each graph also
 * runs unfused, and the fused plan must use fewer kernels.
 */
import assert from "node:assert/strict";
import { FUSION_CASES, graphOf } from "../../cases/fusion_cases.ts";
import { checkAgainstReference, F16_TOL, F32_TOL } from "../util/fused_check.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

for (const c of FUSION_CASES) {
  for (const dtype of c.dtypes) {
    Deno.test({
      name: `webgpu fused vs reference (${dtype}): ${c.name}`,
      ignore: !gpu.ctx,
      fn: async () => {
        const g = graphOf(c.name, c.body, dtype, c.backward);
        const feeds = randomFeeds(g, 1000 + FUSION_CASES.indexOf(c), c.ints);
        const tol = c.tol?.[dtype] ?? (dtype === "f16" ? F16_TOL : F32_TOL);
        const fused = await checkAgainstReference(gpu.ctx!, g, feeds, { fuse: true, tol });
        const unfused = await checkAgainstReference(gpu.ctx!, g, feeds, { fuse: false, tol });
        assert.ok(fused.kernels < unfused.kernels, `fused ${fused.kernels} vs unfused ${unfused.kernels}`);
      },
    });
  }
}
