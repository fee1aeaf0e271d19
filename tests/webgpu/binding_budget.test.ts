/**
 * The WebGPU row compiles within the adapter's storage-buffer budget (issue 15: Chrome's SwiftShader
 * adapter allows 10 per shader stage, and fused LAMB training kernels bound up to 13). The budget comes
 * from the device context, so a context that claims 10 gets kernels of at most 10 bindings, and the step
 * still runs.
 */
import assert from "node:assert/strict";
import { WEBGPU } from "../../engine/backends.ts";
import { fixtureStep } from "../util/bert_steps.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

Deno.test({
  name: "webgpu: a fused LAMB training step stays within the adapter's storage-buffer budget",
  ignore: !gpu.ctx,
  fn: async () => {
    const ctx = gpu.ctx!;
    const g = fixtureStep("fp32", [2, 8, 2]);
    const widest = async (budget: number) => {
      const limited = { ...ctx, limits: { ...ctx.limits, maxStorageBuffersPerShaderStage: budget } };
      const { compiled } = await WEBGPU.compile(limited, g, true);
      return Math.max(...compiled.plan.kernels.map((k) => k.bindings.length));
    };
    const unlimited = await widest(ctx.limits.maxStorageBuffersPerShaderStage);
    assert.ok(unlimited > 10, `without a tight budget some kernel binds more than 10 (widest: ${unlimited})`);
    assert.ok(await widest(10) <= 10);
  },
});
