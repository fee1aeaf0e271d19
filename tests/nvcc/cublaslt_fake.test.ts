/**
 * The cuBLASLt FFI layer (runtime/cuda/cublaslt.ts LtCall) and the executor's library GEMMs against a
 * fake libcublasLt.so (tests/util/fake_cuda.ts FAKE_LT: every descriptor attribute LtCall sets, keyed by
 * cublasLt.h's enum values, and cublasLtMatmul as the documentation defines it on host memory). Device memory is host memory under the fake driver of cuda_runtime_fake.test.ts (its C is
 * taken from that file, as gpu_run_rehearsal.test.ts does), so a call's results can be read back: this
 * checks the row-major to column-major swap, the per-call bias pointer and the bias batch stride through
 * the real Deno FFI bindings, which the CPU shim (tests/util/lt_cpu.ts) bypasses.
 *
 * Needs gcc and cuda.h; ignored without them.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { graphOf } from "../../cases/fusion_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { LtCall, type LtCallSpec } from "../../runtime/cuda/cublaslt.ts";
import { CudaDriver } from "../../runtime/cuda/driver.ts";
import { CudaExecutor } from "../../runtime/cuda/cuda_executor.ts";
import { KernelCache } from "../../runtime/cuda/kernel_cache.ts";
import { Nvrtc } from "../../runtime/cuda/nvrtc.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { decodeF16, encodeF16 } from "../../numeric/half.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";
import { exactValues, fakeLtSession } from "../util/fake_lt_session.ts";

const fake = await fakeLtSession("bertfuse-fake-lt-");
const { dir, why, discoverOpts } = fake;
if (why) console.log(`fake cuBLASLt tests skipped: ${why}`);
const open = () => fake.open();
const values = exactValues;

type Dt = "f32" | "f16";
const bytesOf = (x: Float32Array, dt: Dt) =>
  new Uint8Array(dt === "f32" ? x.slice().buffer : encodeF16(x).buffer as ArrayBuffer);

/** Host copies of `arrays` in fresh device allocations (host memory under the fake driver). */
function upload(driver: CudaDriver, arrays: readonly [Float32Array, Dt][]): bigint[] {
  return arrays.map(([x, dt]) => {
    const b = bytesOf(x, dt);
    const p = driver.alloc(b.byteLength + 256, "fake-lt test");
    driver.copyHtoD(p, b, "fake-lt test");
    return p;
  });
}

function download(driver: CudaDriver, p: bigint, n: number, dt: Dt): Float32Array {
  const b = new Uint8Array(n * (dt === "f32" ? 4 : 2));
  driver.copyDtoH(b, p, "fake-lt test");
  return dt === "f32"
    ? new Float32Array(b.buffer)
    : decodeF16(new Uint16Array(b.buffer), new Float32Array(n));
}

const close = (got: Float32Array, want: number[], tol: number, what: string) => {
  assert.equal(got.length, want.length, what);
  const scale = Math.max(1, ...want.map(Math.abs));
  want.forEach((w, i) => assert.ok(Math.abs(got[i] - w) <= tol * scale, `${what}[${i}]: ${got[i]} vs ${w}`));
};

Deno.test({
  name:
    "fake cuBLASLt: LtCall's BIAS epilogue, per-call bias pointers on one descriptor (row-major D = A·Bᵀ + bias)",
  ignore: !!why,
  fn: () => {
    const { driver, lt } = open();
    const [m, n, k] = [5, 6, 7];
    const spec: LtCallSpec = {
      m,
      n,
      k,
      batch: 1,
      a: { dtype: "f32", ld: k, trans: false, batchStride: 0 },
      // B stored [n, k] and read transposed, as a linear layer's weight.
      b: { dtype: "f32", ld: k, trans: true, batchStride: 0 },
      d: { dtype: "f32", ld: n, trans: false, batchStride: m * n },
      epilogue: { kind: "bias", bias: { dtype: "f32", batchStride: 0 } },
      align: { a: 256, b: 256, d: 256, bias: 256 },
    };
    const call = new LtCall(lt, spec, "fake bias");
    const [x, w, b1, b2] = [values(m * k, 1), values(n * k, 2), values(n, 3), values(n, 4)];
    const [px, pw, pb1, pb2, pd] = upload(driver, [[x, "f32"], [w, "f32"], [b1, "f32"], [b2, "f32"], [
      new Float32Array(m * n),
      "f32",
    ]]);
    const stream = driver.createStream();
    try {
      for (const [pb, bias] of [[pb1, b1], [pb2, b2], [pb1, b1]] as const) {
        call.run(px, pw, pd, stream, "fake bias", pb);
        driver.synchronize(stream);
        const want = Array.from({ length: m * n }, (_, e) => {
          const [i, j] = [Math.floor(e / n), e % n];
          let acc = 0;
          for (let p = 0; p < k; p++) acc = Math.fround(acc + Math.fround(x[i * k + p] * w[j * k + p]));
          return Math.fround(acc + bias[j]);
        });
        close(download(driver, pd, m * n, "f32"), want, 1e-6, "D");
      }
      assert.throws(() => call.run(px, pw, pd, stream, "no bias"), /needs its vector/);
    } finally {
      call.destroy();
    }
  },
});

Deno.test({
  name: "fake cuBLASLt: heads as batch entries, A shared (stride 0), the bias stepped per head (f16)",
  ignore: !!why,
  fn: () => {
    const { driver, lt } = open();
    // [S, H·Dh] = X [S, K] · Wᵀ (W [H·Dh, K]) + bias, stored heads-major [H, S, Dh].
    const [s, h, dh, k] = [4, 3, 2, 5];
    const spec: LtCallSpec = {
      m: s,
      n: dh,
      k,
      batch: h,
      a: { dtype: "f16", ld: k, trans: false, batchStride: 0 },
      b: { dtype: "f16", ld: k, trans: true, batchStride: dh * k },
      d: { dtype: "f16", ld: dh, trans: false, batchStride: s * dh },
      epilogue: { kind: "bias", bias: { dtype: "f16", batchStride: dh } },
      align: { a: 256, b: 256, d: 256, bias: 256 },
    };
    const call = new LtCall(lt, spec, "fake heads");
    const [x, w, bias] = [values(s * k, 5), values(h * dh * k, 6), values(h * dh, 7)];
    const [px, pw, pb, pd] = upload(driver, [[x, "f16"], [w, "f16"], [bias, "f16"], [
      new Float32Array(h * s * dh),
      "f16",
    ]]);
    const stream = driver.createStream();
    try {
      call.run(px, pw, pd, stream, "fake heads", pb);
      driver.synchronize(stream);
      const want = Array.from({ length: h * s * dh }, (_, e) => {
        const [hh, i, d] = [Math.floor(e / (s * dh)), Math.floor(e / dh) % s, e % dh];
        const j = hh * dh + d;
        let acc = 0;
        for (let p = 0; p < k; p++) acc += x[i * k + p] * w[j * k + p];
        return acc + bias[j];
      });
      // One f16 rounding of each output.
      close(download(driver, pd, h * s * dh, "f16"), want, 2 ** -10, "heads-major D");
    } finally {
      call.destroy();
    }
  },
});

Deno.test({
  name: "fake cuBLASLt: the executor runs a linear layer's plan as one BIAS-epilogue call (no kernel)",
  ignore: !!why,
  fn: async () => {
    const { driver } = open();
    const g = graphOf(
      "linear + bias",
      (mb, dt) =>
        mb.param("x", [5, 7], "zeros", dt).matmul(mb.param("w", [6, 7], "zeros", dt), { transposeB: true })
          .add(mb.param("bias", [6], "zeros", dt).broadcastTo([5, 6])),
      "f32",
      false,
    );
    const compiled = compileGraph(g, { fuse: true, target: target("cuda") });
    assert.ok(compiled.plan.kernels.every((k) => k.library?.call.epilogue && !k.library.epilogue));
    const nvrtc = Nvrtc.open(discoverOpts);
    const ctx = { driver, nvrtc, cache: new KernelCache(`${dir}/cache`), description: "fake" };
    // No graph: the fake's cublasLtMatmul runs when called, so a captured one would not replay.
    const ex = await CudaExecutor.create(ctx, compiled.plan, { graphs: false, cublasLt: discoverOpts });
    try {
      const feeds = randomFeeds(g, 9160);
      for (const [name, data] of Object.entries(feeds)) ex.write(name, data);
      await ex.step();
      await ex.finish();
      const ref = evaluate(g, feeds, { precision: "f32" });
      assertMatchesReference(ref, { out: await ex.read("out") }, {
        tol: F32_TOL,
        device: "cuda-fake",
        plan: `${compiled.plan.kernels.length} kernels`,
      });
    } finally {
      ex.destroy();
    }
  },
});
