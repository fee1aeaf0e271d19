/**
 * Target profiles (compiler/targets/profiles.ts) on the emitted CUDA: row reductions with 256 rows and
 * more, which lavapipe's profile gives a thread each, lowered for `cuda-sm90` (a block per row,
 * warp-shuffle reductions, coalesced loads), run on the CPU through g++ and the shim, against the
 * reference interpreter on fresh random inputs.
 */
import assert from "node:assert/strict";
import { target } from "../util/target.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { profileCases } from "../../cases/profile_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { cxxVersion, runOnCpu } from "../util/cuda_cpu.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";

const version = await cxxVersion();
const noCxx = version ? "" : " (g++ not found)"; // in test names: the ignored list says why

for (const [i, { case: c, graph: g }] of profileCases().entries()) {
  Deno.test({
    name: `profiles: ${c.name}, lowered for cuda-sm90, on the CUDA shim${noCxx}`,
    ignore: !version,
    async fn() {
      const serial = compileGraph(g, { fuse: true, target: target("cuda", PROFILES.lavapipe) });
      const gpu = compileGraph(g, { fuse: true, target: target("cuda", PROFILES["cuda-sm90"]) });
      // Where the profiles differ: some reduce kernel gets more workgroups (a block per row).
      const blocks = (x: typeof gpu) => x.kernels.filter((k) => k.kind === "reduce").map((k) => k.workgroups);
      assert.ok(
        blocks(gpu).some((w, j) => w > blocks(serial)[j]),
        `${blocks(serial)} vs ${blocks(gpu)}: the profile changed nothing`,
      );
      const feeds = randomFeeds(g, 300 + i, c.ints);
      const ref = evaluate(g, feeds, { precision: "f32" });
      const dir = await Deno.makeTempDir({ prefix: "bertfuse-profile-" });
      try {
        const out = await runOnCpu(dir, gpu.plan, feeds);
        assertMatchesReference(ref, Object.fromEntries(out), {
          tol: c.tol?.f32 ?? F32_TOL,
          device: "cuda-shim (cuda-sm90)",
          plan: `${gpu.plan.kernels.length} kernels`,
        });
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

Deno.test({
  name:
    `profiles: a scatter-add with many owners per column sums in the serial loop's order (same bits)${noCxx}`,
  ignore: !version,
  async fn() {
    const { case: c, graph: g } = profileCases().find((x) => x.case.name.startsWith("embedding"))!;
    const serial = compileGraph(g, { fuse: true, target: target("cuda", PROFILES.lavapipe) });
    // Only the scatter differs (the LayerNorm's reductions keep their layout, so the updates are the same).
    const owners = compileGraph(g, {
      fuse: true,
      target: target("cuda", { ...PROFILES.lavapipe, scatterOwners: 128 }),
    });
    const scatter = (x: typeof owners) => x.kernels.find((k) => k.kind === "scatter")!;
    assert.ok(
      scatter(owners).workgroups > scatter(serial).workgroups,
      "the profile did not spread the scatter",
    );
    const feeds = randomFeeds(g, 77, c.ints);
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-profile-" });
    try {
      const a = await runOnCpu(dir, serial.plan, feeds);
      const b = await runOnCpu(dir, owners.plan, feeds);
      const grad = [...a.keys()].find((n) => n.includes("table"))!;
      assert.ok(grad, `no table gradient among ${[...a.keys()]}`);
      assert.deepEqual(Array.from(b.get(grad)!), Array.from(a.get(grad)!));
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
