/**
 * Bias-gradient epilogues through the real FFI path against the fake libcublasLt (tests/util/fake_cuda.ts
 * FAKE_LT: column-major, BGRADA over op(A)'s rows, as many as D's rows, BGRADB over op(B)'s columns, as
 * many as D's columns): LtCall's mapping of our operands onto the library's, and the executor running a
 * linear layer's backward planned for CUDA, with the epilogue (the column-sum kernels left out of the
 * step, the vector copied into its other buffers) and after a heuristic miss for it (one warning line,
 * the call without the epilogue, the column-sum kernels launched). The fake driver runs no kernels, so the
 * values checked are the library calls' own.
 *
 * Needs gcc and cuda.h; ignored without them.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { graphOf } from "../../cases/fusion_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { linear } from "../../dsl/mod.ts";
import type { Plan } from "../../plan/plan.ts";
import { LtCall, type LtCallSpec } from "../../runtime/cuda/cublaslt.ts";
import { CudaExecutor } from "../../runtime/cuda/cuda_executor.ts";
import { KernelCache } from "../../runtime/cuda/kernel_cache.ts";
import { Nvrtc } from "../../runtime/cuda/nvrtc.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { bgradCalls } from "../util/bgrad_plans.ts";
import { exactValues, fakeLtSession } from "../util/fake_lt_session.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";

const fake = await fakeLtSession("bertfuse-fake-bgrad-");
const { dir, why, discoverOpts } = fake;
if (why) console.log(`fake cuBLASLt bias-gradient tests skipped: ${why}`);
const open = () => fake.open();
const values = exactValues;

Deno.test({
  name: "fake cuBLASLt: LtCall's bias gradient of our A (BGRADB) and of our B (BGRADA), lengths m and n",
  ignore: !!why,
  fn: () => {
    const { driver, lt } = open();
    const stream = driver.createStream();
    // dW [m, n] = op(A)·op(B) over k tokens: A stored [k, m] read transposed, B stored [k, n].
    const [m, n, k] = [5, 3, 7];
    const a = values(k * m, 11), b = values(k * n, 12);
    for (const operand of ["a", "b"] as const) {
      const spec: LtCallSpec = {
        m,
        n,
        k,
        batch: 1,
        a: { dtype: "f32", ld: m, trans: true, batchStride: 0 },
        b: { dtype: "f32", ld: n, trans: false, batchStride: 0 },
        d: { dtype: "f32", ld: n, trans: false, batchStride: m * n },
        epilogue: { kind: "bgrad", operand, bias: { dtype: "f32", batchStride: 0 } },
        align: { a: 256, b: 256, d: 256, bias: 256 },
      };
      const call = new LtCall(lt, spec, `fake bgrad ${operand}`);
      const ptrs = [a, b, new Float32Array(m * n), new Float32Array(Math.max(m, n) + 1).fill(-9)].map((x) => {
        const p = driver.alloc(x.byteLength + 256, "fake bgrad");
        driver.copyHtoD(p, new Uint8Array(x.buffer as ArrayBuffer), "fake bgrad");
        return p;
      });
      try {
        call.run(ptrs[0], ptrs[1], ptrs[2], stream, "fake bgrad", ptrs[3]);
        driver.synchronize(stream);
        const got = new Float32Array(Math.max(m, n) + 1);
        driver.copyDtoH(new Uint8Array(got.buffer), ptrs[3], "fake bgrad");
        // Σ over the tokens of the operand's stored rows: A's m columns or B's n columns.
        const [x, cols] = operand === "a" ? [a, m] : [b, n];
        const want = Array.from({ length: cols }, (_, j) => {
          let s = 0;
          for (let p = 0; p < k; p++) s += x[p * cols + j];
          return s;
        });
        assert.deepEqual([...got.slice(0, cols)], want, `operand ${operand}`);
        // Exactly that many written: the element after the vector keeps its fill.
        assert.equal(got[cols], -9, `operand ${operand}: wrote past its length`);
        const dw = new Float32Array(m * n);
        driver.copyDtoH(new Uint8Array(dw.buffer), ptrs[2], "fake bgrad");
        let acc = 0;
        for (let p = 0; p < k; p++) acc += a[p * m + 1] * b[p * n + 2];
        assert.equal(dw[1 * n + 2], Math.fround(acc), "D alongside the epilogue");
      } finally {
        call.destroy();
      }
    }
  },
});

/** A linear layer's backward (w stored [out, in], 2048 tokens: the column sum in two kernels) for CUDA. */
function linearPlan() {
  const g = graphOf(
    "linear backward",
    (m, dt) =>
      linear(
        m.param("x", [4, 512, 24], "zeros", dt),
        m.param("w", [40, 24], "zeros", dt),
        m.param("bias", [40], "zeros", dt),
      ),
    "f32",
    true,
  );
  const { plan } = compileGraph(g, { fuse: true, target: target("cuda", PROFILES["cuda-sm90"]) });
  return { g, plan };
}

/** The plan with one more output buffer the bias gradient is copied into (as a flat vector's piece is). */
function withCopy(plan: Plan): Plan {
  const [{ epilogue }] = bgradCalls(plan);
  const src = plan.buffers[epilogue.bias.buffer];
  const id = plan.buffers.length;
  return {
    ...plan,
    buffers: [...plan.buffers, {
      ...src,
      id,
      name: "grad.bias (copy)",
      role: "output",
      slot: plan.slots.length,
    }],
    slots: [...plan.slots, { id: plan.slots.length, bytes: src.bytes }],
    outputs: { ...plan.outputs, "grad.bias (copy)": id },
    kernels: plan.kernels.map((k) => {
      const e = k.library?.call.epilogue;
      if (!k.library || e?.kind !== "bgrad") return k;
      return {
        ...k,
        library: { ...k.library, call: { ...k.library.call, epilogue: { ...e, copies: [id] } } },
      };
    }),
  };
}

async function runLinear(plan: Plan, seed: number) {
  const { g } = linearPlan();
  const { driver } = open();
  const nvrtc = Nvrtc.open(discoverOpts);
  const ctx = { driver, nvrtc, cache: new KernelCache(`${dir}/cache`), description: "fake" };
  const warnings: string[] = [];
  // No graph: the fake's cublasLtMatmul runs when called, so a captured one would not replay.
  const ex = await CudaExecutor.create(ctx, plan, {
    graphs: false,
    cublasLt: discoverOpts,
    warn: (l) => warnings.push(l),
  });
  try {
    const feeds = randomFeeds(g, seed);
    for (const [name, data] of Object.entries(feeds)) ex.write(name, data);
    // profile() runs the step program and names each launch (a library call counts as one).
    const launched = (await ex.profile(1)).launches.map((l) => l.name);
    const names = Object.keys(plan.outputs).filter((n) => n !== "loss");
    return {
      warnings,
      launched,
      ref: evaluate(g, feeds, { precision: "f32" }),
      got: Object.fromEntries(await Promise.all(names.map(async (n) => [n, await ex.read(n)] as const))),
    };
  } finally {
    ex.destroy();
  }
}

Deno.test({
  name:
    "fake cuBLASLt: the executor runs the bias gradient in the call, the column sums left out, copies made",
  ignore: !!why,
  fn: async () => {
    const { plan } = linearPlan();
    const [{ kernel, epilogue }] = bgradCalls(plan);
    assert.equal(epilogue.fallback.length, 2);
    const r = await runLinear(withCopy(plan), 7301);
    assert.deepEqual(r.warnings, []);
    assert.ok(r.launched.includes(kernel.name));
    for (const f of epilogue.fallback) assert.ok(!r.launched.includes(f), `${f} launched`);
    const ref = new Map([...r.ref, ["grad.bias (copy)", r.ref.get("grad.bias")!]]);
    // The fake driver runs no kernel: only the library calls' outputs hold values (the forward's BIAS
    // call, dX, dW and the bias gradient with its copy).
    const want = new Map(
      ["out", "grad.x", "grad.w", "grad.bias", "grad.bias (copy)"].map((n) => [n, ref.get(n)!]),
    );
    assertMatchesReference(want, r.got, {
      tol: F32_TOL,
      device: "cuda-fake",
      plan: `${plan.kernels.length} kernels`,
    });
  },
});

Deno.test({
  name: "fake cuBLASLt: a heuristic miss for BGRAD warns once and launches the column sums instead",
  ignore: !!why,
  fn: async () => {
    const { plan } = linearPlan();
    const [{ kernel, epilogue }] = bgradCalls(plan);
    Deno.env.set("FAKE_LT_NO_BGRAD", "1");
    try {
      const r = await runLinear(plan, 7302);
      assert.equal(r.warnings.length, 1, r.warnings.join("\n"));
      assert.match(r.warnings[0], /no algorithm .*BGRADB epilogue.*runs without its bias-gradient epilogue/);
      assert.ok(r.launched.includes(kernel.name), "the call without the epilogue");
      for (const f of epilogue.fallback) assert.ok(r.launched.includes(f), `${f} not launched`);
      const want = new Map(["out", "grad.x", "grad.w"].map((n) => [n, r.ref.get(n)!]));
      assertMatchesReference(want, r.got, { tol: F32_TOL, device: "cuda-fake (miss)", plan: "fallback" });
    } finally {
      Deno.env.delete("FAKE_LT_NO_BGRAD");
    }
  },
});
