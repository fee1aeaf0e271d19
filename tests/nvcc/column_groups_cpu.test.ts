/**
 * Column sums lowered for `cuda-sm90` (tests/util/column_sum_cases.ts: threads per column that fill the
 * device, combined in shared memory; a LayerNorm backward's dγ and dβ second passes as one kernel), run
 * on the CPU through g++ and the CUDA shim against the reference interpreter on fresh random inputs. A
 * copy of a plan whose second pass skips the first part must fail the same check.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import type { Plan } from "../../plan/plan.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { caseProfile, columnSumCases } from "../util/column_sum_cases.ts";
import { cxxVersion, runOnCpu } from "../util/cuda_cpu.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";
import { dropFirstPart } from "../util/scatter_check.ts";

const version = await cxxVersion();
const noCxx = version ? "" : " (g++ not found)"; // in test names: the ignored list says why
const sm90 = PROFILES["cuda-sm90"];

async function runPlan(plan: Plan, feeds: Record<string, ArrayLike<number>>) {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-colsum-" });
  try {
    return Object.fromEntries(await runOnCpu(dir, plan, feeds));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

for (const [i, c] of columnSumCases().entries()) {
  Deno.test({
    name: `column sums: ${c.name}, cuda-sm90, on the CUDA shim${noCxx}`,
    ignore: !version,
    async fn() {
      const compiled = compileGraph(c.graph, { fuse: true, target: target("cuda", caseProfile(c, sm90)) });
      assert.equal(c.expect(compiled), undefined);
      const feeds = randomFeeds(c.graph, 1100 + i);
      assertMatchesReference(
        evaluate(c.graph, feeds, { precision: "f32" }),
        await runPlan(compiled.plan, feeds),
        {
          tol: F32_TOL,
          device: `cuda-shim (cuda-sm90, seed ${1100 + i})`,
          plan: compiled.plan.kernels.map((k) => k.name).join(","),
        },
      );
    },
  });
}

Deno.test({
  name: `column sums: a second pass that skips a part fails the check${noCxx}`,
  ignore: !version,
  async fn() {
    const c = columnSumCases().find((x) => x.name.startsWith("bias gradient"))!;
    const { plan } = compileGraph(c.graph, { fuse: true, target: target("cuda", sm90) });
    const feeds = randomFeeds(c.graph, 1200);
    const ref = evaluate(c.graph, feeds, { precision: "f32" });
    const out = await runPlan(dropFirstPart(plan, "cuda"), feeds);
    assert.throws(
      () =>
        assertMatchesReference(ref, out, {
          tol: F32_TOL,
          device: "cuda-shim (planted)",
          plan: "a part dropped",
        }),
      /db/,
    );
  },
});

Deno.test({
  name: `column sums: a row-block kernel that skips its last row fails the check${noCxx}`,
  ignore: !version,
  async fn() {
    const c = columnSumCases().find((x) => x.name.startsWith("residual LayerNorm"))!;
    const { plan } = compileGraph(c.graph, { fuse: true, target: target("cuda", caseProfile(c, sm90)) });
    const at = plan.kernels.findIndex((k) => /rr < 4;/.test(k.source!.code));
    assert.ok(at >= 0, `no row-block kernel in ${plan.kernels.map((k) => k.name)}`);
    const source = plan.kernels[at].source!;
    const planted = {
      ...plan,
      kernels: plan.kernels.map((k, i) =>
        i === at ? { ...k, source: { ...source, code: source.code.replace(/rr < 4;/, "rr < 3;") } } : k
      ),
    };
    const feeds = randomFeeds(c.graph, 1250);
    const ref = evaluate(c.graph, feeds, { precision: "f32" });
    const out = await runPlan(planted, feeds);
    assert.throws(
      () =>
        assertMatchesReference(ref, out, {
          tol: F32_TOL,
          device: "cuda-shim (planted)",
          plan: "last row skipped",
        }),
      /grad\./,
    );
  },
});
