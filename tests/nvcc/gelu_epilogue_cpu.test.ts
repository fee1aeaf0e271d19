/**
 * cuBLASLt's GELU epilogues (compiler/lower/gemm_dgelu.ts, gemm_gelu_aux.ts, compiler/fusion/gelu_aux.ts):
 * on plans for cuda-sm90 alone, the backward GEMM dY·W2 of a layer with a tanh-form GELU writes
 * dP = (dY·W2)·GELU'(P) itself (DGELU) from the pre-activation P the forward stored, and where the bias
 * fits D's type the forward GEMM writes P = x·W1ᵀ + b1 and GELU(P) itself (GELU_AUX_BIAS): no scratch
 * products, no epilogue kernels.
 * Plans run on the CPU through g++ and the CUDA shim, library calls through cuBLASLt's column-major
 * definition with LtCall's descriptors (tests/util/lt_gelu_cpu.ts), against the reference interpreter on
 * fresh random inputs: two linear layers around a tanh GELU (f32), forward and backward, on the
 * library path and as template kernels; the erf GELU takes no DGELU; a one-layer BERT LAMB fp16 step
 * with hidden_act gelu_new on both paths.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { graphOf } from "../../cases/fusion_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { seededRandom } from "../../cases/random.ts";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { compileGraph } from "../../compiler/compile.ts";
import { roundTripGraph } from "../../compiler/storage_precision.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { gelu, geluTanh, linear, type Tensor } from "../../dsl/mod.ts";
import type { DType } from "../../ir/mod.ts";
import { defineBert } from "../../models/bert.ts";
import { withLowCopyFeeds } from "../../plan/low_copies.ts";
import { type Plan, UPDATE_PREFIX } from "../../plan/plan.ts";
import { ltDescriptors } from "../../runtime/cuda/lt_mapping.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { lambStep } from "../util/bert_steps.ts";
import { cxxVersion, runOnCpu } from "../util/cuda_cpu.ts";
import { assertMatchesReference, F16_TOL, F32_TOL } from "../util/fused_check.ts";

const version = await cxxVersion();
const sm90 = PROFILES["cuda-sm90"];

async function runPlan(plan: Plan, feeds: Record<string, ArrayLike<number>>, library: boolean) {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-dgelu-" });
  try {
    return Object.fromEntries(await runOnCpu(dir, plan, feeds, library, "-O2"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const callsWith = (plan: Plan, kind: string) =>
  plan.kernels.filter((k) => k.library?.call.epilogue?.kind === kind);
const dgeluCalls = (plan: Plan) => callsWith(plan, "dgelu");

/**
 * x [1024, 24] -> linear 24->64 -> act -> linear 64->40, backward of a probe loss. Over 1024 tokens the bias
 * gradient's column sum takes two passes, so the GELU backward stays in the dY·W2 kernel (over fewer, it
 * joins the one-pass column sum's kernel, which then writes dP beside the sum, and no call computes it).
 */
function twoLinears(act: (x: Tensor) => Tensor, dt: DType) {
  return graphOf(
    "linear act linear",
    (m) => {
      const x = m.param("x", [1024, 24], "zeros", dt);
      const h = act(
        linear(x, m.param("w1", [64, 24], "zeros", dt), m.param("b1", [64], "zeros", dt)).cast("f32"),
      ).cast(dt);
      return linear(h, m.param("w2", [40, 64], "zeros", dt), m.param("b2", [40], "zeros", dt));
    },
    dt,
    true,
  );
}

// f32 here; the f16 DGELU call (an f16 pre-activation and D) runs in the BERT fp16 step below.
for (const dt of ["f32"] as DType[]) {
  Deno.test({
    name:
      `DGELU: linear, tanh GELU, linear (${dt}): the backward GEMM writes dP, on the shim and as templates${
        version ? "" : " (g++ not found)"
      }`,
    ignore: !version,
    async fn() {
      const g = twoLinears(geluTanh, dt);
      const { plan } = compileGraph(g, { fuse: true, target: target("cuda", sm90) });
      const calls = dgeluCalls(plan);
      assert.equal(calls.length, 1, "the dY·W2 call takes DGELU");
      const [k] = calls;
      assert.equal(k.library!.epilogue, undefined, "no epilogue kernel");
      const call = k.library!.call;
      const ep = call.epilogue as Extract<typeof call.epilogue, { kind: "dgelu" }>;
      // The aux is the pre-activation the forward stored, in D's type, [1024, 64]: ld 64, the library D's rows.
      assert.equal(ep.aux.dtype, call.d.dtype);
      assert.deepEqual([call.m, call.n, ep.aux.ld, ltDescriptors(call).aux?.ld], [1024, 64, 64, 64]);
      // The forward call writes it: GELU_AUX_BIAS (the f32 bias fits an f32 D), no epilogue kernel either.
      const [fwd] = callsWith(plan, "gelu_aux_bias");
      assert.ok(fwd, "the x·W1ᵀ call takes GELU_AUX_BIAS");
      assert.equal(fwd.library!.epilogue, undefined);
      const fe = fwd.library!.call.epilogue as Extract<typeof call.epilogue, { kind: "gelu_aux_bias" }>;
      assert.deepEqual([fe.aux.buffer, fe.aux.ld, fe.bias.dtype], [ep.aux.buffer, 64, "f32"]);
      assert.equal(ltDescriptors(fwd.library!.call).bias?.length, 64, "the bias over the library D's rows");
      const feeds = randomFeeds(g, 5100 + (dt === "f16" ? 1 : 0));
      const ref = evaluate(g, feeds, { precision: "f32" });
      for (const library of [true, false]) {
        assertMatchesReference(ref, await runPlan(plan, feeds, library), {
          tol: dt === "f16" ? F16_TOL : F32_TOL,
          device: `cuda-shim (${library ? "library calls" : "template kernels"}, ${dt})`,
          plan: `${plan.kernels.length} kernels`,
        });
      }
    },
  });
}

Deno.test("GELU epilogues: the erf GELU stores no pre-activation for them and takes neither", () => {
  for (const dt of ["f32"] as DType[]) {
    const { plan } = compileGraph(twoLinears(gelu, dt), { fuse: true, target: target("cuda", sm90) });
    assert.deepEqual(dgeluCalls(plan), [], dt);
    assert.deepEqual(callsWith(plan, "gelu_aux_bias"), [], dt);
    const tanh = compileGraph(twoLinears(geluTanh, dt), { fuse: true, target: target("cuda", sm90) }).plan;
    assert.equal(dgeluCalls(tanh).length, 1, dt);
  }
});

Deno.test({
  name: `DGELU: a BERT LAMB fp16 step with hidden_act gelu_new on cuda-sm90, both paths${
    version ? "" : " (g++ not found)"
  }`,
  ignore: !version,
  async fn() {
    const model = defineBert("bert-dgelu-test", {
      vocab_size: 99,
      hidden_size: 128,
      num_hidden_layers: 1,
      num_attention_heads: 2,
      intermediate_size: 96,
      hidden_act: "gelu_new",
      hidden_dropout_prob: 0.1,
      attention_probs_dropout_prob: 0.1,
      max_position_embeddings: 64,
      type_vocab_size: 2,
      initializer_range: 0.02,
      layer_norm_eps: 1e-12,
      num_labels: 2,
    });
    const [B, S, P] = [16, 64, 4];
    const g = lambStep(model, "fp16", [B, S, P], true);
    const compiled = compileGraph(g, { fuse: true, target: target("cuda", sm90) });
    const { plan } = compiled;
    assert.equal(dgeluCalls(plan).length, 1, "the FFN's dY·W2 call");
    // The forward keeps its epilogue kernel: BERT's biases are f32 on f16 products, which cublasLt.h does
    // not document for GELU_AUX_BIAS (gemm_library.ts LT_BIAS_TYPES).
    assert.deepEqual(callsWith(plan, "gelu_aux_bias"), []);
    const r = seededRandom(95);
    const feeds = {
      ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: 99 }, r, 3),
      ...optimizerStepFeeds(g, r, 1024),
    };
    // The reference with the plan's roundings (the stored f16 pre-activation among them).
    const refGraph = roundTripGraph(compiled.graph, compiled.fusion, compiled.storage);
    const raw = evaluate(refGraph, withLowCopyFeeds(plan, feeds), { precision: "f32" });
    const ref = new Map([...raw].map(([name, v]) => [name, raw.get(UPDATE_PREFIX + name) ?? v]));
    for (const library of [true, false]) {
      assertMatchesReference(ref, await runPlan(plan, feeds, library), {
        tol: { rtol: 4e-3, atol: 1e-3 },
        device: `cuda-shim (cuda-sm90, fp16, ${library ? "library" : "template"} path)`,
        plan: `${plan.steps.length} steps`,
      });
    }
  },
});
