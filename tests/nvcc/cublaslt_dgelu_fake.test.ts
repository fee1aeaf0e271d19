/**
 * The DGELU epilogue through the real FFI path against the fake libcublasLt (tests/util/fake_cuda.ts
 * FAKE_LT: D = product ⊙ GELU'(aux), the tanh form, the aux read column-major with EPILOGUE_AUX_LD in D's
 * type): LtCall's descriptors for a plan GEMM with a "dgelu" epilogue (runtime/cuda/lt_mapping.ts: our
 * row-major [m, n] aux is the library's n×m one, leading dimension our n), in f32 and f16, against the
 * same arithmetic in TypeScript on exact random values; and the executor running a plan of two linear
 * layers around a tanh GELU (forward GELU_AUX_BIAS, backward DGELU) against the reference interpreter on
 * fresh random inputs, for the outputs the library calls compute alone (the fake driver runs no kernel).
 *
 * Needs gcc and cuda.h; ignored without them.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { graphOf } from "../../cases/fusion_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { compileGraph } from "../../compiler/compile.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { geluTanh, linear } from "../../dsl/mod.ts";
import { decodeF16, encodeF16 } from "../../numeric/half.ts";
import { LtCall, type LtCallSpec } from "../../runtime/cuda/cublaslt.ts";
import { CudaExecutor } from "../../runtime/cuda/executor.ts";
import { KernelCache } from "../../runtime/cuda/kernel_cache.ts";
import { Nvrtc } from "../../runtime/cuda/nvrtc.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { exactValues, fakeLtSession } from "../util/fake_lt_session.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";

const fake = await fakeLtSession("bertfuse-fake-dgelu-");
if (fake.why) console.log(`fake cuBLASLt DGELU tests skipped: ${fake.why}`);

/** GELU'(x) of the tanh form, as cuBLASLt's DGELU applies it. */
function geluSlope(x: number): number {
  const c = Math.sqrt(2 / Math.PI), a = 0.044715, t = Math.tanh(c * (x + a * x ** 3));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x);
}

for (const dtype of ["f32", "f16"] as const) {
  Deno.test({
    name: `fake cuBLASLt: LtCall with DGELU reads our row-major pre-activation (${dtype})`,
    ignore: !!fake.why,
    fn: () => {
      const { driver, lt } = fake.open();
      const stream = driver.createStream();
      // dP [m, n] = dY [m, k] · W2 [k, n] (W2 stored [n, k], read transposed), ⊙ GELU'(P [m, n]).
      const [m, n, k] = [6, 16, 5];
      const dy = exactValues(m * k, 21), w = exactValues(n * k, 22);
      const pre = exactValues(m * n, 23).map((v) => v * 3);
      const spec: LtCallSpec = {
        m,
        n,
        k,
        batch: 1,
        a: { dtype, ld: k, trans: false, batchStride: 0 },
        b: { dtype, ld: k, trans: true, batchStride: 0 },
        d: { dtype, ld: n, trans: false, batchStride: m * n },
        epilogue: { kind: "dgelu", aux: { dtype, ld: n } },
        align: { a: 256, b: 256, d: 256, bias: 256 },
      };
      const call = new LtCall(lt, spec, `fake dgelu ${dtype}`);
      const bytes = (x: Float32Array) =>
        dtype === "f32" ? new Uint8Array(x.buffer as ArrayBuffer) : new Uint8Array(encodeF16(x).buffer);
      const ptrs = [dy, w, new Float32Array(m * n), pre].map((x) => {
        const p = driver.alloc(x.byteLength + 256, "fake dgelu");
        driver.copyHtoD(p, bytes(x), "fake dgelu");
        return p;
      });
      try {
        call.run(ptrs[0], ptrs[1], ptrs[2], stream, "fake dgelu", undefined, undefined, ptrs[3]);
        driver.synchronize(stream);
        const raw = new Uint8Array(m * n * (dtype === "f32" ? 4 : 2));
        driver.copyDtoH(raw, ptrs[2], "fake dgelu");
        const got = dtype === "f32"
          ? new Float32Array(raw.buffer)
          : decodeF16(new Uint16Array(raw.buffer), new Float32Array(m * n));
        for (let i = 0; i < m; i++) {
          for (let j = 0; j < n; j++) {
            let acc = 0;
            for (let p = 0; p < k; p++) acc += dy[i * k + p] * w[j * k + p];
            const want = acc * geluSlope(pre[i * n + j]);
            const tol = dtype === "f32" ? 1e-5 : 2e-3;
            assert.ok(Math.abs(got[i * n + j] - want) <= tol * (1 + Math.abs(want)), `[${i}, ${j}]`);
          }
        }
      } finally {
        call.destroy();
      }
    },
  });
}

Deno.test({
  name:
    "fake cuBLASLt: an aux leading dimension cuBLASLt refuses (not a multiple of 8) is refused by the mapping",
  ignore: !!fake.why,
  fn: () => {
    const { lt } = fake.open();
    const spec: LtCallSpec = {
      m: 4,
      n: 12,
      k: 3,
      batch: 1,
      a: { dtype: "f32", ld: 3, trans: false, batchStride: 0 },
      b: { dtype: "f32", ld: 12, trans: false, batchStride: 0 },
      d: { dtype: "f32", ld: 12, trans: false, batchStride: 48 },
      epilogue: { kind: "dgelu", aux: { dtype: "f32", ld: 12 } },
      align: { a: 256, b: 256, d: 256, bias: 256 },
    };
    assert.throws(() => new LtCall(lt, spec, "fake dgelu ld 12"), /DGELU aux/);
  },
});

Deno.test({
  name: "fake cuBLASLt: LtCall with GELU_AUX_BIAS writes our row-major pre-activation and its tanh GELU",
  ignore: !!fake.why,
  fn: () => {
    const { driver, lt } = fake.open();
    const stream = driver.createStream();
    // P [m, n] = X [m, k] · W1 [k, n] (W1 stored [n, k]) + b [n]; D = GELU(P).
    const [m, n, k] = [6, 16, 5];
    const x = exactValues(m * k, 31), w = exactValues(n * k, 32), b = exactValues(n, 33);
    const spec: LtCallSpec = {
      m,
      n,
      k,
      batch: 1,
      a: { dtype: "f32", ld: k, trans: false, batchStride: 0 },
      b: { dtype: "f32", ld: k, trans: true, batchStride: 0 },
      d: { dtype: "f32", ld: n, trans: false, batchStride: m * n },
      epilogue: {
        kind: "gelu_aux_bias",
        bias: { dtype: "f32", batchStride: 0 },
        aux: { dtype: "f32", ld: n },
      },
      align: { a: 256, b: 256, d: 256, bias: 256, aux: 256 },
    };
    const call = new LtCall(lt, spec, "fake gelu_aux_bias");
    const ptrs = [x, w, new Float32Array(m * n), b, new Float32Array(m * n)].map((v) => {
      const p = driver.alloc(v.byteLength + 256, "fake gelu_aux_bias");
      driver.copyHtoD(p, new Uint8Array(v.buffer as ArrayBuffer), "fake gelu_aux_bias");
      return p;
    });
    try {
      call.run(ptrs[0], ptrs[1], ptrs[2], stream, "fake gelu_aux_bias", ptrs[3], undefined, ptrs[4]);
      driver.synchronize(stream);
      const [d, p] = [ptrs[2], ptrs[4]].map((q) => {
        const out = new Float32Array(m * n);
        driver.copyDtoH(new Uint8Array(out.buffer), q, "fake gelu_aux_bias");
        return out;
      });
      const c = Math.sqrt(2 / Math.PI);
      for (let i = 0; i < m; i++) {
        for (let j = 0; j < n; j++) {
          let pre = b[j];
          for (let q = 0; q < k; q++) pre += x[i * k + q] * w[j * k + q];
          const act = 0.5 * pre * (1 + Math.tanh(c * (pre + 0.044715 * pre ** 3)));
          assert.ok(Math.abs(p[i * n + j] - pre) <= 1e-5 * (1 + Math.abs(pre)), `P[${i}, ${j}]`);
          assert.ok(Math.abs(d[i * n + j] - act) <= 1e-5 * (1 + Math.abs(act)), `D[${i}, ${j}]`);
        }
      }
    } finally {
      call.destroy();
    }
  },
});

Deno.test({
  name: "fake cuBLASLt: the executor runs linear, tanh GELU, linear with GELU_AUX_BIAS and DGELU calls",
  ignore: !!fake.why,
  fn: async () => {
    const g = graphOf(
      "linear gelu linear",
      (m) => {
        const x = m.param("x", [1024, 24], "zeros", "f32");
        const h = geluTanh(
          linear(x, m.param("w1", [64, 24], "zeros", "f32"), m.param("b1", [64], "zeros", "f32")),
        );
        return linear(h, m.param("w2", [40, 64], "zeros", "f32"), m.param("b2", [40], "zeros", "f32"));
      },
      "f32",
      true,
    );
    const { plan } = compileGraph(g, {
      fuse: true,
      target: target("cuda", PROFILES["cuda-sm90"]),
    });
    const kinds = plan.kernels.map((k) => k.library?.call.epilogue?.kind);
    assert.ok(kinds.includes("gelu_aux_bias") && kinds.includes("dgelu"), kinds.join(", "));
    const { driver } = fake.open();
    const nvrtc = Nvrtc.open(fake.discoverOpts);
    const ctx = { driver, nvrtc, cache: new KernelCache(`${fake.dir}/cache`), description: "fake" };
    const warnings: string[] = [];
    // No graph: the fake's cublasLtMatmul runs when called, so a captured one would not replay.
    const ex = await CudaExecutor.create(ctx, plan, {
      graphs: false,
      cublasLt: fake.discoverOpts,
      warn: (l) => warnings.push(l),
    });
    try {
      const feeds = randomFeeds(g, 7401);
      for (const [name, data] of Object.entries(feeds)) ex.write(name, data);
      await ex.profile(1);
      assert.deepEqual(warnings, []);
      const ref = evaluate(g, feeds, { precision: "f32" });
      // What the calls compute alone: the forward (GELU_AUX_BIAS, then BIAS), dP by DGELU from the probe
      // and the stored P, and dX and dW1 from dP.
      const names = ["out", "grad.x", "grad.w1"];
      const got = Object.fromEntries(
        await Promise.all(names.map(async (n) => [n, await ex.read(n)] as const)),
      );
      assertMatchesReference(new Map(names.map((n) => [n, ref.get(n)!])), got, {
        tol: F32_TOL,
        device: "cuda-fake",
        plan: `${plan.kernels.length} kernels`,
      });
    } finally {
      ex.destroy();
    }
  },
});
