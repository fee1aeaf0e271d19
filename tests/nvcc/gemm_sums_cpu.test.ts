/**
 * Sums of GEMM products as cuBLASLt's C with beta 1 (compiler/passes/gemm_sum_order.ts, compiler/fusion/sums_into_gemms.ts,
 * CUDA plans): y = a1·b1 + a2ᵀ·b2 + a3·b3ᵀ + a4ᵀ·b4ᵀ (every transpose combination; m ≠ n ≠ k, so a
 * C laid out the wrong way aborts the shim's layout check), plain and batched, f32 and f16, is four calls,
 * each later one reading the running sum the one before wrote, and no other kernel. Run on the CPU shim
 * (the calls through cuBLASLt's column-major definition with LtCall's descriptors, tests/util/lt_cpu.ts)
 * and, as the fallback, as the template GEMMs; through the executor on the fake libcublasLt
 * (tests/util/fake_cuda.ts, which adds beta·C with C's own layout) and its heuristic miss; each against the
 * reference interpreter on fresh random inputs. Planted: beta 0 (no C) and C from the wrong buffer fail.
 * And a BERT LAMB fp16 step (one layer) on the shim, whose attention backward's dX sum is two calls with C.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { graphOf } from "../../cases/fusion_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { seededRandom } from "../../cases/random.ts";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import type { Tensor } from "../../dsl/mod.ts";
import type { DType, Graph } from "../../ir/mod.ts";
import { type Plan, type PlanGemm } from "../../plan/plan.ts";
import { CudaExecutor } from "../../runtime/cuda/cuda_executor.ts";
import { KernelCache } from "../../runtime/cuda/kernel_cache.ts";
import { Nvrtc } from "../../runtime/cuda/nvrtc.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { lambStep, oneLayerBert } from "../util/bert_steps.ts";
import { cxxVersion, planReference, runOnCpu } from "../util/cuda_cpu.ts";
import { fakeLtSession } from "../util/fake_lt_session.ts";
import { assertMatchesReference, F16_TOL, F32_TOL } from "../util/fused_check.ts";

const version = await cxxVersion();
const noCxx = version ? "" : " (g++ not found)"; // in test names: the ignored list says why
const fake = await fakeLtSession("bertfuse-gemm-sums-");
const [M, N, K] = [6, 5, 7];

/** Σ of four products over [..batch, M, N], one per (transpose A, transpose B). */
function sumOfProducts(batch: readonly number[], dt: DType): Graph {
  return graphOf(
    `sum of four products ${batch.join("x")}`,
    (m, d) => {
      const shape = (r: number, c: number) => [...batch, r, c];
      const terms: Tensor[] = [[false, false], [true, false], [false, true], [true, true]].map((
        [ta, tb],
        i,
      ) =>
        m.param(`a${i}`, ta ? shape(K, M) : shape(M, K), "zeros", d).matmul(
          m.param(`b${i}`, tb ? shape(N, K) : shape(K, N), "zeros", d),
          { transposeA: ta, transposeB: tb },
        )
      );
      return terms.reduce((s, t) => s.add(t));
    },
    dt,
    false,
  );
}

const calls = (plan: Plan): PlanGemm[] => plan.kernels.flatMap((k) => (k.library ? [k.library.call] : []));

/** The plan with each call's C edited (undefined: none, beta 0). */
const withC = (plan: Plan, edit: (c: PlanGemm["c"], i: number) => PlanGemm["c"]): Plan => {
  let i = 0;
  return {
    ...plan,
    kernels: plan.kernels.map((k) => {
      if (!k.library) return k;
      const { c, ...call } = k.library.call;
      const next = edit(c, i++);
      return { ...k, library: { ...k.library, call: next ? { ...call, c: next } : call } };
    }),
  };
};

async function onShim(plan: Plan, feeds: Record<string, ArrayLike<number>>, library = true) {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-gemm-sums-" });
  try {
    return Object.fromEntries(await runOnCpu(dir, plan, feeds, library, "-O2"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const cases = [
  { batch: [], dt: "f32" },
  { batch: [], dt: "f16" },
  { batch: [3], dt: "f32" },
  { batch: [2], dt: "f16" },
] as const;

for (const [i, c] of cases.entries()) {
  const what = `${c.batch.length ? `batch ${c.batch[0]}, ` : ""}${c.dt}`;
  Deno.test({
    name: `gemm sums: four products (all transposes, ${what}) are four calls with C on the shim${noCxx}`,
    ignore: !version,
    async fn() {
      const g = sumOfProducts(c.batch, c.dt);
      const { plan, gemms } = compileGraph(g, { fuse: true, target: target("cuda") });
      // Four calls, no kernel beside them; each later one adds the sum the one before wrote.
      assert.equal(plan.kernels.length, 4, plan.kernels.map((k) => k.name).join(", "));
      const cs = calls(plan);
      assert.equal(cs.length, 4);
      assert.equal(cs[0].c, undefined);
      for (let j = 1; j < 4; j++) {
        assert.equal(cs[j].c?.buffer, cs[j - 1].d.buffer, `call ${j} reads call ${j - 1}'s D`);
        assert.deepEqual({ ...cs[j].c, buffer: 0 }, { ...cs[j].d, buffer: 0 }, "C laid out as D");
      }
      assert.equal(cs[3].d.buffer, plan.outputs.out);
      assert.ok(plan.kernels.every((k) => !k.library!.epilogue), "no epilogue kernel");
      assert.equal(gemms.filter((d) => /stored sum as C/.test(d.reason)).length, 3);
      const feeds = randomFeeds(g, 7400 + i);
      const ref = evaluate(g, feeds, { precision: "f32" });
      const tol = c.dt === "f16" ? F16_TOL : F32_TOL;
      // The calls; the template GEMMs (the fallback), which add the same sum in their epilogues.
      for (const library of [true, false]) {
        assertMatchesReference(ref, await onShim(plan, feeds, library), {
          tol,
          device: `cuda-shim (${library ? "cuBLASLt" : "template"}, seed ${7400 + i})`,
          plan: `${plan.kernels.length} kernels`,
        });
      }
      // Planted: beta 0 (each product alone), and C from the wrong buffer (the last call skips p3).
      const planted: [string, Plan][] = [
        ["beta 0", withC(plan, () => undefined)],
        ["C from the wrong buffer", withC(plan, (x, j) => (j === 3 ? { ...x!, buffer: cs[1].d.buffer } : x))],
      ];
      for (const [name, p] of planted) {
        const out = await onShim(p, feeds);
        assert.throws(
          () => assertMatchesReference(ref, out, { tol, device: `planted: ${name}`, plan: "" }),
          /out/,
        );
      }
    },
  });
}

Deno.test({
  name:
    "gemm sums: the executor on the fake libcublasLt passes C with beta 1; a heuristic miss runs the templates",
  ignore: !!fake.why,
  async fn() {
    const { driver } = fake.open();
    const g = sumOfProducts([2], "f32");
    const { plan } = compileGraph(g, { fuse: true, target: target("cuda") });
    const nvrtc = Nvrtc.open(fake.discoverOpts);
    const ctx = { driver, nvrtc, cache: new KernelCache(`${fake.dir}/cache`), description: "fake" };
    const run = async (seed: number) => {
      const warnings: string[] = [];
      // No graph: the fake's cublasLtMatmul runs when called, so a captured one would not replay.
      const ex = await CudaExecutor.create(ctx, plan, {
        graphs: false,
        cublasLt: fake.discoverOpts,
        warn: (l) => warnings.push(l),
      });
      try {
        const feeds = randomFeeds(g, seed);
        for (const [name, data] of Object.entries(feeds)) ex.write(name, data);
        await ex.step();
        await ex.finish();
        const launched = ex.program.flatMap((s) => (s.op === "launch" ? [s.kernel.name] : []));
        return { warnings, launched, feeds, out: await ex.read("out") };
      } finally {
        ex.destroy();
      }
    };
    const r = await run(7410);
    assert.deepEqual(r.warnings, []);
    assert.deepEqual(r.launched, [], "four calls, no kernel");
    assertMatchesReference(evaluate(g, r.feeds, { precision: "f32" }), { out: r.out }, {
      tol: F32_TOL,
      device: "cuda-fake",
      plan: `${plan.kernels.length} calls`,
    });
    // A heuristic miss for a call with C: one warning per distinct call, its kernel launched instead (the
    // fake driver runs no kernel, so only the program is checked).
    Deno.env.set("FAKE_LT_NO_C", "1");
    try {
      const miss = await run(7411);
      assert.ok(
        miss.warnings.length >= 1 && miss.warnings.every((w) => /C with beta 1/.test(w)),
        miss.warnings[0],
      );
      assert.equal(miss.launched.length, 3, "the three calls with C as template kernels");
    } finally {
      Deno.env.delete("FAKE_LT_NO_C");
    }
  },
});

Deno.test({
  name: `gemm sums: a BERT training step (fp16, LAMB, one layer) planned for cuda-sm90 on the shim${noCxx}`,
  ignore: !version,
  async fn() {
    const model = oneLayerBert("bert-gemm-sums-test");
    const [B, S, P] = [4, 64, 4];
    const g = lambStep(model, "fp16", [B, S, P], true);
    const compiled = compileGraph(g, { fuse: true, target: target("cuda", PROFILES["cuda-sm90"]) });
    const { plan } = compiled;
    // The attention backward's dX: dV·Wv + dK·Wk summed into the dQ·Wq call, as two calls with C; and the
    // tied word embedding's gradient, the decoder's dW plus the embedding scatter-add.
    const withCalls = plan.kernels.filter((k) => k.library?.call.c);
    assert.equal(withCalls.length, 3, withCalls.map((k) => k.name).join(", "));
    const r = seededRandom(95);
    const feeds = {
      ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: 99 }, r, 3),
      ...optimizerStepFeeds(g, r, 1024),
    };
    // The reference with the plan's roundings (each stored partial sum f16), as bgrad_cpu.test.ts.
    const ref = planReference(compiled, feeds);
    const tol = { rtol: 4e-3, atol: 1e-3 };
    assertMatchesReference(ref, await onShim(plan, feeds), {
      tol,
      device: "cuda-shim (cuda-sm90, fp16)",
      plan: `${plan.steps.length} steps`,
    });
    // Planted: beta 0 on every call with C.
    const out = await onShim(withC(plan, () => undefined), feeds);
    assert.throws(() => assertMatchesReference(ref, out, { tol, device: "planted: beta 0", plan: "" }));
  },
});
