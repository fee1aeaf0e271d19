/**
 * Parameter groups on WebGPU (lavapipe in CI): the optimizer's flat vectors cut into >= 3 groups train the
 * small fixture BERT as one group does (LAMB and AdamW, fused kernels), and as the reference interpreter
 * does; checkpoint save and resume through the groups are exact; and a plan tensor over the adapter's
 * binding limit is refused before allocation with one line naming it, the limit and what to change.
 */
import assert from "node:assert/strict";
import { f32, gid, i32, if_, type Kernel, lt, store } from "../../compiler/kernel_ir/ir.ts";
import { WEBGPU } from "../../engine/backends.ts";
import type { Graph } from "../../ir/mod.ts";
import { ResourceError } from "../../model_io/size_check.ts";
import { ReferenceExecutor } from "../../runtime/reference/reference_executor.ts";
import { WebGPUExecutor } from "../../runtime/webgpu/webgpu_executor.ts";
import type { OptimizerKind } from "../../optimizer/update.ts";
import {
  budgetFor,
  deviceState,
  groupedGraph,
  relativeGap,
  resume,
  save,
  start,
  STATE,
  steps,
} from "../util/group_training.ts";
import { planOf, testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();
const ignore = !gpu.ctx;
const SEED = crypto.getRandomValues(new Uint32Array(1))[0] % 100000 || 1;

const openGpu = async (g: Graph) => (await WEBGPU.compile(gpu.ctx!, g, true)).executor;
const openReference = (g: Graph) => Promise.resolve(new ReferenceExecutor(g));
const bits = (x: ArrayLike<number>) => new Uint32Array(Float32Array.from(x).buffer);

for (const kind of ["lamb", "adamw"] as OptimizerKind[]) {
  Deno.test({
    name: `groups on WebGPU: ${kind} in >= 3 groups trains as one group, and as the reference`,
    ignore,
    fn: async () => {
      const budget = budgetFor(groupedGraph(kind).layout, 4);
      const cut = await start(openGpu, kind, budget, SEED);
      const one = await start(openGpu, kind, undefined, SEED);
      const ref = await start(openReference, kind, undefined, SEED);
      try {
        assert.ok(cut.layout.groups.length >= 3, `${cut.layout.groups.length} groups`);
        for (const s of [cut, one, ref]) await steps(s, 3, SEED);
        const [c, o, r] = [await deviceState(cut), await deviceState(one), await deviceState(ref)];
        const what = `${kind}, ${cut.layout.groups.length} groups (seed ${SEED})`;
        assert.equal(c.state[STATE.step], 3, what);
        // Same kernels but for the groups' partial sums of the global norm: float rounding only.
        for (
          const [name, a, b] of [["weights", c.flatParams, o.flatParams], ["m", c.m, o.m], ["v", c.v, o.v]]
        ) {
          const gap = relativeGap(a as Float32Array, b as Float32Array);
          assert.ok(gap < 1e-5, `${name}: grouped vs one group on WebGPU, gap ${gap}: ${what}`);
        }
        // Against the interpreter (different kernels, fused sums): the tolerance of the other step tests.
        for (
          const [name, a, b] of [["weights", c.flatParams, r.flatParams], ["m", c.m, r.m], ["v", c.v, r.v]]
        ) {
          const gap = relativeGap(a as Float32Array, b as Float32Array);
          assert.ok(gap < 2e-3, `${name}: grouped WebGPU vs reference, gap ${gap}: ${what}`);
        }
        assert.ok(Math.abs(c.state[STATE.gradNorm] / r.state[STATE.gradNorm] - 1) < 1e-3, what);
      } finally {
        cut.ex.destroy();
        one.ex.destroy();
      }
    },
  });
}

Deno.test({
  name: "groups on WebGPU: checkpoint save and resume through the groups are exact",
  ignore,
  fn: async () => {
    const budget = budgetFor(groupedGraph("lamb").layout, 4);
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-groups-gpu-" });
    const s = await start(openGpu, "lamb", budget, SEED);
    try {
      await steps(s, 2, SEED);
      const ck = await save(s, dir, SEED);
      await steps(s, 2, SEED);
      const straight = await deviceState(s);
      // The same executor, set back to the checkpoint's step: everything comes from the saved files.
      await resume(s, ck);
      assert.equal(s.step, 2);
      await steps(s, 2, SEED);
      const again = await deviceState(s);
      assert.deepEqual(bits(again.flatParams), bits(straight.flatParams), `weights (seed ${SEED})`);
      assert.deepEqual(bits(again.m), bits(straight.m), "m");
      assert.deepEqual(bits(again.v), bits(straight.v), "v");
      assert.deepEqual(bits(again.state), bits(straight.state), "state");
    } finally {
      s.ex.destroy();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "groups on WebGPU: a plan binding a tensor over the limit unsplit is refused before allocation, in one line",
  ignore,
  fn: async () => {
    const limit = gpu.ctx!.limits.maxStorageBufferBindingSize;
    const n = limit / 4 + 64;
    const k: Kernel = {
      name: "k_fill",
      kind: "loop",
      bindings: [{ name: "b_act", buffer: 0, t: "f32", access: "read_write", elements: n }],
      shared: [],
      workgroupSize: 256,
      workgroups: Math.ceil(n / 256),
      body: [if_(lt(gid, i32(n)), [store("b_act", gid, f32(1))])],
      about: ["test: an activation over the binding limit"],
      usesF16: false,
    };
    const plan = planOf([k], [{ name: "%42 logits", dtype: "f32", shape: [n], role: "activation" }]);
    await assert.rejects(
      () => WebGPUExecutor.create(gpu.ctx!, plan),
      (e: Error) => {
        assert.ok(e instanceof ResourceError, `${e.name}: ${e.message}`);
        assert.match(e.message, /'%42 logits'/);
        assert.match(e.message, new RegExp(`${(n * 4)} bytes`));
        assert.match(e.message, new RegExp(`maxStorageBufferBindingSize of ${limit}`));
        assert.match(e.message, /compile it for this adapter/);
        assert.ok(!e.message.includes("\n"));
        return true;
      },
    );
  },
});
