/**
 * Bias gradients as cuBLASLt BGRADA / BGRADB epilogues (compiler/lower/gemm_bgrad.ts), planned for
 * `cuda-sm90` and run on the CPU through g++ and the CUDA shim with the library path (the calls through
 * cuBLASLt's column-major definition with LtCall's descriptors, tests/util/lt_cpu.ts), against the
 * reference interpreter on fresh random inputs: a linear layer's backward with its weight stored
 * [out, in] (dW = dYᵀ·X: the sum over A, BGRADB once mapped) and [in, out] (dW = Xᵀ·dY: over B, BGRADA),
 * over fewer tokens than a two-pass column sum needs and over more, and with dropout after it (the first
 * pass fused with dY's producer, which keeps running); each on the epilogue path (the
 * column-sum kernels left out, as the runtime does) and on the fallback path (the call without the
 * epilogue, the kernels run). The epilogue on the other operand must fail (the other operand's sums), and
 * the shim refuses a vector length that does not match the library D's side (as cuBLASLt's layouts do). And a BERT training
 * step (hf-tiny, fp32, LAMB) planned for cuda-sm90 with its library calls, on both paths.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { graphOf } from "../../cases/fusion_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { seededRandom } from "../../cases/random.ts";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { lambStep, oneLayerBert } from "../util/bert_steps.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { dropout, linear } from "../../dsl/mod.ts";
import type { Graph } from "../../ir/mod.ts";
import { loadModel } from "../../models/load.ts";
import { type Plan } from "../../plan/plan.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { ltDescriptors } from "../../runtime/cuda/lt_mapping.ts";
import { bgradCalls, epiloguePath, fallbackPath, otherOperand } from "../util/bgrad_plans.ts";
import { afterStep, cxxVersion, planReference, runOnCpu, runSourceOnCpu } from "../util/cuda_cpu.ts";
import { LT_CPU, ltCallCpp } from "../util/lt_cpu.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";

const version = await cxxVersion();
const noCxx = version ? "" : " (g++ not found)"; // in test names: the ignored list says why
const sm90 = PROFILES["cuda-sm90"];

async function runPlan(plan: Plan, feeds: Record<string, ArrayLike<number>>) {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-bgrad-" });
  try {
    return Object.fromEntries(await runOnCpu(dir, plan, feeds, true, "-O2"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * y = x·wᵀ + b (w stored [out, in], a linear layer) or x·w + b (w stored [in, out]), backward of a probe
 * loss; with `drop`, dropout after it, so dY is the dropout's backward, which fusion computes in the kernel
 * taking dY's per-part sums (as in BERT's attention-output and FFN-output layers).
 */
function linearBackward(
  tokens: readonly number[],
  inF: number,
  outF: number,
  wIn: boolean,
  drop = false,
): Graph {
  return graphOf(
    `linear backward, w stored ${wIn ? "[in, out]" : "[out, in]"}`,
    (m, dt) => {
      const x = m.param("x", [...tokens, inF], "zeros", dt);
      const b = m.param("bias", [outF], "zeros", dt);
      if (drop) {
        return dropout(
          linear(x, m.param("w", [outF, inF], "zeros", dt), b),
          0.1,
          m.input("rng_key", "u32", [2]),
        );
      }
      if (!wIn) return linear(x, m.param("w", [outF, inF], "zeros", dt), b);
      const rows = tokens.reduce((a, t) => a * t, 1);
      const y = x.reshape([rows, inF]).matmul(m.param("w", [inF, outF], "zeros", dt));
      return y.add(b.broadcastTo([rows, outF])).reshape([...tokens, outF]);
    },
    "f32",
    true,
  );
}

const cases = [
  { tokens: [64], inF: 24, outF: 24, wIn: false, drop: false, operand: "a", lib: "bgradb", kernels: 1 },
  { tokens: [64], inF: 24, outF: 24, wIn: true, drop: false, operand: "b", lib: "bgrada", kernels: 1 },
  // 2048 tokens: the column sum in two passes (compiler/passes/split_column_sums.ts), two kernels covered.
  { tokens: [4, 512], inF: 24, outF: 40, wIn: false, drop: false, operand: "a", lib: "bgradb", kernels: 2 },
  { tokens: [4, 512], inF: 40, outF: 24, wIn: true, drop: false, operand: "b", lib: "bgrada", kernels: 2 },
  // dY is the dropout's backward: producer fusion leaves its column sum to the epilogue
  // (compiler/fusion/library_sums.ts), so dY roots a kernel of its own and both passes are covered.
  { tokens: [4, 512], inF: 24, outF: 40, wIn: false, drop: true, operand: "a", lib: "bgradb", kernels: 2 },
] as const;

for (const [i, c] of cases.entries()) {
  const stored = `${c.wIn ? "[in, out]" : "[out, in]"}${c.drop ? ", dropout after" : ""}`;
  const shape = `${c.tokens.join("x")} tokens, ${c.inF} -> ${c.outF}, w stored ${stored}`;
  Deno.test({
    name: `bias gradient as ${c.lib.toUpperCase()}: linear backward (${shape}) on the CUDA shim${noCxx}`,
    ignore: !version,
    async fn() {
      const g = linearBackward(c.tokens, c.inF, c.outF, c.wIn, c.drop);
      const { plan } = compileGraph(g, { fuse: true, target: target("cuda", sm90) });
      const calls = bgradCalls(plan);
      assert.equal(calls.length, 1, "one call computes the bias gradient");
      const { kernel, epilogue } = calls[0];
      assert.equal(epilogue.operand, c.operand);
      assert.equal(epilogue.bias.buffer, plan.outputs["grad.bias"]);
      assert.equal(epilogue.fallback.length, c.kernels, `covered: ${epilogue.fallback}`);
      // The mapping by construction: our A is the library's B, our B its A.
      assert.equal(ltDescriptors(kernel.library!.call).bias?.kind, c.lib);
      // The covered kernels write the vector, and nothing after the GEMM needs them.
      const names = plan.kernels.map((k) => k.name);
      for (const f of epilogue.fallback) assert.ok(names.indexOf(f) < names.indexOf(kernel.name), f);
      const seed = 7100 + i;
      const feeds = randomFeeds(g, seed, { rng_key: (r) => r.u32() });
      const ref = evaluate(g, feeds, { precision: "f32" });
      for (const [path, p] of [["epilogue", epiloguePath(plan)], ["fallback", fallbackPath(plan)]] as const) {
        assert.equal(p.steps.length, plan.steps.length - (path === "epilogue" ? c.kernels : 0));
        assertMatchesReference(ref, await runPlan(p, feeds), {
          tol: F32_TOL,
          device: `cuda-shim (${path} path, seed ${seed})`,
          plan: `${p.steps.length} steps: ${names}`,
        });
      }
    },
  });
}

Deno.test({
  name: `bias gradient: the epilogue on the other operand fails (square and not)${noCxx}`,
  ignore: !version,
  async fn() {
    // Square: BGRADA and BGRADB both have the length; the sum is over X instead of dY.
    const square = cases[0];
    const g = linearBackward(square.tokens, square.inF, square.outF, square.wIn);
    const { plan } = compileGraph(g, { fuse: true, target: target("cuda", sm90) });
    const feeds = randomFeeds(g, 7200);
    const ref = evaluate(g, feeds, { precision: "f32" });
    const out = await runPlan(otherOperand(plan), feeds);
    assert.throws(
      () =>
        assertMatchesReference(ref, out, {
          tol: F32_TOL,
          device: "cuda-shim (planted)",
          plan: "other operand",
        }),
      /grad\.bias/,
    );
    // Not square: the other operand's sums, as many as the other side has.
    const wide = cases[2];
    const g2 = linearBackward(wide.tokens, wide.inF, wide.outF, wide.wIn);
    const p2 = compileGraph(g2, { fuse: true, target: target("cuda", sm90) }).plan;
    const feeds2 = randomFeeds(g2, 7201);
    const out2 = await runPlan(otherOperand(p2), feeds2);
    assert.throws(
      () =>
        assertMatchesReference(evaluate(g2, feeds2, { precision: "f32" }), out2, {
          tol: F32_TOL,
          device: "cuda-shim (planted)",
          plan: "other operand",
        }),
      /grad\.bias/,
    );
  },
});

Deno.test({
  name: `bias gradient: the shim refuses a vector of the wrong length, as cuBLASLt's layouts do${noCxx}`,
  ignore: !version,
  async fn() {
    const c = cases[2];
    const g = linearBackward(c.tokens, c.inF, c.outF, c.wIn);
    const { plan } = compileGraph(g, { fuse: true, target: target("cuda", sm90) });
    const call = bgradCalls(plan)[0].kernel.library!.call;
    const length = ltDescriptors(call).bias!.length;
    assert.equal(length, c.outF, "BGRADB: as many as the library D's columns (our m)");
    const { m, n, k } = call;
    const source = (planted: boolean) => {
      const cpp = ltCallCpp(call, "a", "b", "d", "v");
      const wrong = cpp.replace(`, v, ${length}, 0)`, `, v, ${length + 1}, 0)`);
      assert.notEqual(wrong, cpp, "the length is where the call names it");
      return `${LT_CPU}
int main() {
  static float a[${m * k}], b[${k * n}], d[${m * n}], v[${Math.max(m, n) + 1}];
  ${planted ? wrong : cpp}
  return 0;
}
`;
    };
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-bgrad-len-" });
    try {
      await runSourceOnCpu(dir, source(false), new Uint8Array());
      await assert.rejects(() => runSourceOnCpu(dir, source(true), new Uint8Array()), /layouts do not fit/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    `bias gradient: a BERT training step (hf-tiny) planned for cuda-sm90, library calls, both paths${noCxx}`,
  ignore: !version,
  async fn() {
    const model = await loadModel("tests/fixtures/hf-tiny/pretraining/config.json");
    const [B, S, P] = [4, 64, 3];
    const g = lambStep(model, "fp32", [B, S, P], false);
    const { plan } = compileGraph(g, { fuse: true, target: target("cuda", sm90) });
    const calls = bgradCalls(plan);
    // Q, K and V of every layer read their stored dY; the other linear layers' column sums are fused
    // with the kernel producing dY (dropout or GELU backward) and stay kernels.
    assert.equal(
      calls.length,
      3 * model.config.num_hidden_layers,
      calls.map((c) => c.kernel.name).join(", "),
    );
    const r = seededRandom(93);
    const feeds = {
      ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: model.config.vocab_size }, r, 3),
      ...optimizerStepFeeds(g, r, 1),
    };
    const step = evaluate(g, feeds, { precision: "f32" });
    // An output the step also updates holds its new value afterwards (cuda_emit_cpu.test.ts afterTheStep).
    const ref = afterStep(step);
    for (const [path, p] of [["epilogue", epiloguePath(plan)], ["fallback", fallbackPath(plan)]] as const) {
      assertMatchesReference(ref, await runPlan(p, feeds), {
        tol: { rtol: 2e-4, atol: 1e-6 },
        device: `cuda-shim (cuda-sm90, ${path} path)`,
        plan: `${p.steps.length} steps`,
      });
    }
  },
});

Deno.test({
  name:
    `bias gradient: a BERT training step (fp16, LAMB, 1024 tokens) planned for cuda-sm90, both paths${noCxx}`,
  ignore: !version,
  async fn() {
    // 1024 tokens: column sums in two passes, the first fused with the dropout and GELU backward where dY
    // comes from them; f16-stored dY; the gradients also pieces of LAMB's flat vector, which the bias
    // gradients' outputs view (compiler/stages/output_views.ts): the calls copy nothing.
    const model = oneLayerBert("bert-bgrad-test");
    const [B, S, P] = [16, 64, 4];
    const g = lambStep(model, "fp16", [B, S, P], true);
    const compiled = compileGraph(g, { fuse: true, target: target("cuda", sm90) });
    const { plan } = compiled;
    const calls = bgradCalls(plan);
    // Q, K, V, the attention output, FFN up and down: one bias gradient each, written into the flat
    // vector, where its graph output lies too.
    assert.equal(calls.length, 6, calls.map((c) => c.kernel.name).join(", "));
    for (const { kernel, epilogue } of calls) {
      assert.deepEqual(epilogue.copies, [], kernel.name);
      const piece = plan.buffers[epilogue.bias.buffer];
      const views = Object.values(plan.outputs).map((b) => plan.buffers[b])
        .filter((b) =>
          b.slot === piece.slot && (b.offset ?? 0) === (piece.offset ?? 0) && b.bytes === piece.bytes
        );
      assert.equal(views.length, 1, `${kernel.name}: one output views ${piece.name}`);
    }
    const r = seededRandom(94);
    const feeds = {
      ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: 99 }, r, 3),
      ...optimizerStepFeeds(g, r, 1024),
    };
    // The reference with the plan's roundings (flash_attention_plan_cpu.test.ts).
    const ref = planReference(compiled, feeds);
    for (const [path, p] of [["epilogue", epiloguePath(plan)], ["fallback", fallbackPath(plan)]] as const) {
      assertMatchesReference(ref, await runPlan(p, feeds), {
        tol: { rtol: 4e-3, atol: 1e-3 },
        device: `cuda-shim (cuda-sm90, fp16, ${path} path)`,
        plan: `${p.steps.length} steps`,
      });
    }
  },
});
