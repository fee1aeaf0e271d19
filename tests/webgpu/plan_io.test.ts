/** A plan written to disk by the compile command's writer reads back and runs like the in-memory plan. */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { renderOutputs, writeOutputDir } from "../../report/kernel_files.ts";
import { gelu, layerNorm, ModelBuilder } from "../../dsl/mod.ts";
import { PlanError, readPlanDir } from "../../plan/plan_io.ts";
import { WebGPUExecutor } from "../../runtime/webgpu/webgpu_executor.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

function smallGraph() {
  const m = new ModelBuilder("plan-io");
  const x = m.input("x", "f32", [4, 24]);
  const y = layerNorm(
    gelu(x.matmul(m.param("w", [24, 24], "zeros"))),
    m.param("g", [24], "ones"),
    m.param("b", [24], "zeros"),
    1e-5,
  );
  m.output("y", y);
  return m.graph;
}

Deno.test("plan io: written plan reads back with the same kernels, buffers and steps", async () => {
  const c = compileGraph(smallGraph(), { fuse: true, target: target("wgsl") });
  const dir = await Deno.makeTempDir();
  try {
    await writeOutputDir(`${dir}/p`, renderOutputs(c.plan, "test", "report\n"));
    const back = await readPlanDir(`${dir}/p`);
    assert.deepEqual(back.buffers, c.plan.buffers);
    assert.deepEqual(back.steps, c.plan.steps);
    assert.equal(back.kernels.length, c.plan.kernels.length);
    back.kernels.forEach((k, i) => {
      assert.ok(k.source!.code.endsWith(c.plan.kernels[i].source!.code), k.name);
      assert.deepEqual(k.source!.grid, c.plan.kernels[i].source!.grid);
    });
    await Deno.remove(`${dir}/p/wgsl`, { recursive: true });
    await assert.rejects(
      () => readPlanDir(`${dir}/p`),
      (e: unknown) => e instanceof PlanError && /missing \(kernel/.test((e as Error).message),
    );
    await assert.rejects(() => readPlanDir(`${dir}/nowhere`), PlanError);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: "plan io: a plan read from disk runs on WebGPU with the same results as the in-memory plan",
  ignore: !gpu.ctx,
  fn: async () => {
    const g = smallGraph();
    const c = compileGraph(g, { fuse: true, target: target("wgsl") });
    const dir = await Deno.makeTempDir();
    try {
      await writeOutputDir(`${dir}/p`, renderOutputs(c.plan, "test", "report\n"));
      const feeds = randomFeeds(g, 77);
      const a = await WebGPUExecutor.create(gpu.ctx!, c.plan);
      const b = await WebGPUExecutor.create(gpu.ctx!, await readPlanDir(`${dir}/p`));
      const ya = (await a.run(feeds)).y, yb = (await b.run(feeds)).y;
      a.destroy();
      b.destroy();
      assert.deepEqual([...yb], [...ya]);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
