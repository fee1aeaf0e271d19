/**
 * Target profiles (compiler/targets/profiles.ts) on WebGPU: row reductions with 256 rows and more,
 * lowered for `webgpu-gpu` (a workgroup per row) instead of lavapipe's thread per row, run on the test
 * adapter against the reference interpreter on fresh random inputs: the layout a real GPU gets is checked
 * where CI runs, only slower.
 */
import { target } from "../util/target.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { profileCases } from "../../cases/profile_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { WebGPUExecutor } from "../../runtime/webgpu/webgpu_executor.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

for (const [i, { case: c, graph: g }] of profileCases().entries()) {
  Deno.test({
    name: `profiles: ${c.name}, lowered for webgpu-gpu, on WebGPU`,
    ignore: !gpu.ctx,
    async fn() {
      const compiled = compileGraph(g, {
        fuse: true,
        target: target("wgsl", PROFILES["webgpu-gpu"]),
        maxBindings: gpu.ctx!.limits.maxStorageBuffersPerShaderStage,
      });
      const feeds = randomFeeds(g, 400 + i, c.ints);
      const ref = evaluate(g, feeds, { precision: "f32" });
      const ex = await WebGPUExecutor.create(gpu.ctx!, compiled.plan);
      try {
        assertMatchesReference(ref, await ex.run(feeds), {
          tol: c.tol?.f32 ?? F32_TOL,
          device: "webgpu (webgpu-gpu profile)",
          plan: `${compiled.plan.kernels.length} kernels`,
        });
      } finally {
        ex.destroy();
      }
    },
  });
}
