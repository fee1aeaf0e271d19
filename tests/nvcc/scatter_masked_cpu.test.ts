/**
 * Scatter-adds into tables of few rows lowered for `cuda-sm90`, where they become masked column sums in
 * parts (compiler/passes/scatter_column_sums.ts), run on the CPU through g++ and the CUDA shim against the reference
 * interpreter on fresh random inputs: tables of one, two and five rows, a share of the ids out of range
 * (dropped), and the elementwise updates, an output of their own, still stored. A copy of the plan whose
 * second pass skips the first part must fail the same check. And a BERT training step planned for
 * `cuda-sm90`, whose token-type embedding gradient (2 rows) is such a sum, against the reference.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { scatterCases } from "../util/scatter_cases.ts";
import { seededRandom } from "../../cases/random.ts";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { lambStep } from "../util/bert_steps.ts";
import { loadModel } from "../../models/load.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { UPDATE_PREFIX } from "../../plan/plan.ts";
import type { Plan } from "../../plan/plan.ts";
import { cxxVersion, runOnCpu } from "../util/cuda_cpu.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";
import { dropFirstPart, scatterExpected, scatterFeeds } from "../util/scatter_check.ts";

const version = await cxxVersion();
const noCxx = version ? "" : " (g++ not found)"; // in test names: the ignored list says why

async function runPlan(plan: Plan, feeds: Record<string, ArrayLike<number>>) {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-scatter-" });
  try {
    return Object.fromEntries(await runOnCpu(dir, plan, feeds));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

for (const [i, c] of scatterCases().entries()) {
  Deno.test({
    name: `scatter as a masked column sum: ${c.name}, cuda-sm90, on the CUDA shim${noCxx}`,
    ignore: !version,
    async fn() {
      const gpu = compileGraph(c.graph, { fuse: true, target: target("cuda", PROFILES["cuda-sm90"]) });
      const kinds = gpu.plan.kernels.map((k) => k.kind);
      assert.ok(!kinds.includes("scatter"), `still a scatter kernel: ${kinds}`);
      // In parts: a first pass per part, then a sum of the parts; else one pass.
      assert.equal(kinds.filter((k) => k === "reduce").length, c.parts ? 2 : 1, `${kinds}`);
      const serial = compileGraph(c.graph, { fuse: true, target: target("cuda", PROFILES.lavapipe) });
      assert.ok(serial.plan.kernels.some((k) => k.kind === "scatter"), "lavapipe lost its scatter kernel");
      const seed = 500 + i;
      const feeds = scatterFeeds(c, seed);
      const ref = scatterExpected(c, feeds);
      for (const [label, plan] of [["cuda-sm90", gpu.plan], ["lavapipe", serial.plan]] as const) {
        assertMatchesReference(ref, await runPlan(plan, feeds), {
          tol: F32_TOL,
          device: `cuda-shim (${label}, seed ${seed})`,
          plan: `${plan.kernels.length} kernels: ${plan.kernels.map((k) => k.name)}`,
        });
      }
    },
  });
}

Deno.test({
  name: `scatter as a masked column sum: a second pass that skips a part fails the check${noCxx}`,
  ignore: !version,
  async fn() {
    const c = scatterCases().find((x) => x.parts && x.rows > 2)!;
    const { plan } = compileGraph(c.graph, { fuse: true, target: target("cuda", PROFILES["cuda-sm90"]) });
    const planted = dropFirstPart(plan, "cuda");
    const feeds = scatterFeeds(c, 600);
    const ref = scatterExpected(c, feeds);
    const out = await runPlan(planted, feeds);
    assert.throws(() =>
      assertMatchesReference(ref, out, {
        tol: F32_TOL,
        device: "cuda-shim (planted)",
        plan: "a part dropped",
      }), /table:/);
  },
});

Deno.test({
  name:
    `scatter as a masked column sum: a BERT training step planned for cuda-sm90, on the CUDA shim${noCxx}`,
  ignore: !version,
  async fn() {
    const model = await loadModel("tests/fixtures/hf-tiny/pretraining/config.json");
    const [B, S, P] = [4, 64, 3];
    const g = lambStep(model, "fp32", [B, S, P], false);
    const scatters = (profile: typeof PROFILES.lavapipe) =>
      compileGraph(g, { fuse: true, target: target("cuda", profile) }).plan.kernels.filter((k) =>
        k.kind === "scatter"
      );
    const gpu = compileGraph(g, { fuse: true, target: target("cuda", PROFILES["cuda-sm90"]) });
    const left = gpu.plan.kernels.filter((k) => k.kind === "scatter").length;
    assert.equal(left, scatters(PROFILES.lavapipe).length - 1, "the token-type scatter is still a scatter");
    const r = seededRandom(92);
    const feeds = {
      ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: model.config.vocab_size }, r, 3),
      ...optimizerStepFeeds(g, r, 1),
    };
    const step = evaluate(g, feeds, { precision: "f32" });
    // An output the step also updates holds its new value afterwards (cuda_emit_cpu.test.ts afterTheStep).
    const ref = new Map([...step].map(([name, v]) => [name, step.get(UPDATE_PREFIX + name) ?? v]));
    assert.ok(ref.has("grad.bert.embeddings.token_type_embeddings.weight"));
    assertMatchesReference(ref, await runPlan(gpu.plan, feeds), {
      tol: { rtol: 2e-4, atol: 1e-6 },
      device: "cuda-shim (cuda-sm90)",
      plan: `${gpu.plan.kernels.length} kernels`,
    });
  },
});
