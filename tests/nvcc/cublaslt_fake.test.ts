/**
 * The cuBLASLt FFI layer (runtime/cuda/cublaslt.ts LtCall) and the executor's library GEMMs against a
 * fake libcublasLt.so: C compiled here that keeps every descriptor attribute LtCall sets, keyed by
 * cublasLt.h's enum values (CUDA 12.6 header: TRANSA 3, TRANSB 4, EPILOGUE 7 with BIAS = 4, BIAS_POINTER
 * 8, BIAS_BATCH_STRIDE 10, BIAS_DATA_TYPE 26; layout BATCH_COUNT 5, STRIDED_BATCH_OFFSET 6; an attribute
 * it does not know is CUBLAS_STATUS_INVALID_VALUE), and runs cublasLtMatmul as the documentation defines it
 * on host memory: column-major, batched, the BIAS epilogue's vector over D's rows added before D's
 * rounding. Device memory is host memory under the fake driver of cuda_runtime_fake.test.ts (its C is
 * taken from that file, as gpu_run_rehearsal.test.ts does), so a call's results can be read back: this
 * checks the row-major to column-major swap, the per-call bias pointer and the bias batch stride through
 * the real Deno FFI bindings, which the CPU shim (tests/util/lt_cpu.ts) bypasses.
 *
 * Needs gcc and cuda.h; ignored without them.
 */
import assert from "node:assert/strict";
import { graphOf } from "../../cases/fusion_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { emitCUDA } from "../../compiler/codegen/cuda.ts";
import { compileGraph } from "../../compiler/compile.ts";
import { CublasLt, LtCall, type LtCallSpec } from "../../runtime/cuda/cublaslt.ts";
import { CudaDriver } from "../../runtime/cuda/driver.ts";
import { CudaExecutor } from "../../runtime/cuda/executor.ts";
import { KernelCache } from "../../runtime/cuda/kernel_cache.ts";
import { Nvrtc } from "../../runtime/cuda/nvrtc.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { decodeF16, encodeF16 } from "../../numeric/half.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";
import { buildFakeLibs, FAKE_DRIVER, FAKE_NVRTC } from "../util/fake_cuda.ts";

const FAKE_LT = String.raw`
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int transa, transb; unsigned epilogue; uint64_t bias; int64_t bias_stride; int bias_type; } Desc;
typedef struct { int type; uint64_t rows, cols; int64_t ld; int batch; int64_t stride; } Layout;
static int matmuls;
int fake_lt_matmuls(void) { return matmuls; }

int cublasLtCreate(void **h) { *h = malloc(8); return 0; }
int cublasLtDestroy(void *h) { free(h); return 0; }
size_t cublasLtGetVersion(void) { return 130000; }
int cublasLtMatmulDescCreate(Desc **d, int compute, int scale) {
  if (compute != 68 || scale != 0) return 7; /* CUBLAS_COMPUTE_32F, CUDA_R_32F */
  *d = calloc(1, sizeof(Desc)); (*d)->epilogue = 1; (*d)->bias_type = -1; return 0;
}
int cublasLtMatmulDescDestroy(Desc *d) { free(d); return 0; }
int cublasLtMatmulDescSetAttribute(Desc *d, int attr, const void *buf, size_t n) {
  switch (attr) {
    case 3: if (n != 4) return 7; memcpy(&d->transa, buf, 4); return 0;
    case 4: if (n != 4) return 7; memcpy(&d->transb, buf, 4); return 0;
    case 7: if (n != 4) return 7; memcpy(&d->epilogue, buf, 4); return 0;
    case 8: if (n != 8) return 7; memcpy(&d->bias, buf, 8); return 0;
    case 10: if (n != 8) return 7; memcpy(&d->bias_stride, buf, 8); return 0;
    case 26: if (n != 4) return 7; memcpy(&d->bias_type, buf, 4); return 0;
    default: return 7;
  }
}
int cublasLtMatrixLayoutCreate(Layout **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (ld < (int64_t)rows) return 7;
  *l = calloc(1, sizeof(Layout)); (*l)->type = type; (*l)->rows = rows; (*l)->cols = cols; (*l)->ld = ld;
  (*l)->batch = 1; return 0;
}
int cublasLtMatrixLayoutDestroy(Layout *l) { free(l); return 0; }
int cublasLtMatrixLayoutSetAttribute(Layout *l, int attr, const void *buf, size_t n) {
  if (attr == 5 && n == 4) { memcpy(&l->batch, buf, 4); return 0; }
  if (attr == 6 && n == 8) { memcpy(&l->stride, buf, 8); return 0; }
  return 7;
}
int cublasLtMatmulPreferenceCreate(void **p) { *p = malloc(8); return 0; }
int cublasLtMatmulPreferenceDestroy(void *p) { free(p); return 0; }
int cublasLtMatmulPreferenceSetAttribute(void *p, int attr, const void *buf, size_t n) { return 0; }

/* D = op(A)·op(B) must fit: m×k by k×n into m×n, every layout with the same batch count. */
static int fits(const Desc *d, const Layout *a, const Layout *b, const Layout *D) {
  uint64_t m = D->rows, n = D->cols, k = d->transa ? a->rows : a->cols;
  return (d->transa ? a->cols : a->rows) == m && (d->transb ? b->cols : b->rows) == k &&
         (d->transb ? b->rows : b->cols) == n && a->batch == b->batch && b->batch == D->batch;
}
int cublasLtMatmulAlgoGetHeuristic(void *h, Desc *d, Layout *a, Layout *b, Layout *c, Layout *D, void *pref,
                                   int want, uint8_t *results, int *count) {
  if (!fits(d, a, b, D)) return 7;
  memset(results, 0, 96); *count = 1; return 0; /* state (offset 72) CUBLAS_STATUS_SUCCESS */
}

static float half_to_f32(uint16_t h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static uint16_t f32_to_half(float f) { _Float16 x = (_Float16)f; uint16_t h; memcpy(&h, &x, 2); return h; }
static float load(int type, const void *p, int64_t i) {
  if (type == 0) return ((const float *)p)[i];
  if (type == 2) return half_to_f32(((const uint16_t *)p)[i]);
  uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16; float f; memcpy(&f, &bits, 4); return f;
}
static void store(int type, void *p, int64_t i, float v) {
  if (type == 0) { ((float *)p)[i] = v; return; }
  if (type == 2) { ((uint16_t *)p)[i] = f32_to_half(v); return; }
  uint32_t bits; memcpy(&bits, &v, 4); bits += 0x7fff + ((bits >> 16) & 1); ((uint16_t *)p)[i] = bits >> 16;
}

int cublasLtMatmul(void *h, Desc *d, const void *alpha, const void *A, Layout *a, const void *B, Layout *b,
                   const void *beta, const void *C, Layout *c, void *D, Layout *dl, const void *algo,
                   void *ws, size_t wsBytes, void *stream) {
  if (!fits(d, a, b, dl)) return 7;
  if (d->epilogue != 1 && d->epilogue != 4) return 15; /* CUBLAS_STATUS_NOT_SUPPORTED */
  if (d->epilogue == 4 && !d->bias) return 7;
  const int bias_type = d->bias_type == -1 ? dl->type : d->bias_type;
  const float al = *(const float *)alpha, be = *(const float *)beta;
  const int64_t m = dl->rows, n = dl->cols, k = d->transa ? a->rows : a->cols;
  matmuls++;
  for (int q = 0; q < dl->batch; ++q)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int64_t p = 0; p < k; ++p) {
          const float x = load(a->type, A, q * a->stride + (d->transa ? p + i * a->ld : i + p * a->ld));
          const float y = load(b->type, B, q * b->stride + (d->transb ? j + p * b->ld : p + j * b->ld));
          acc += x * y;
        }
        float v = al * acc;
        if (be != 0.0f) v += be * load(c->type, C, q * c->stride + i + j * c->ld);
        if (d->epilogue == 4) v += load(bias_type, (const void *)(uintptr_t)d->bias, q * d->bias_stride + i);
        store(dl->type, D, q * dl->stride + i + j * dl->ld, v);
      }
  return 0;
}
`;

const dir = await Deno.makeTempDir({ prefix: "bertfuse-fake-lt-" });
const why = await buildFakeLibs(dir, {
  "libcuda.so.1": FAKE_DRIVER,
  "libnvrtc.so.13": FAKE_NVRTC,
  "libcublasLt.so.13": FAKE_LT,
});
if (why) console.log(`fake cuBLASLt tests skipped: ${why}`);
const discoverOpts = { env: (n: string) => (n === "LD_LIBRARY_PATH" ? dir : undefined), systemDirs: [] };

let opened: { driver: CudaDriver; lt: CublasLt } | undefined;
function open() {
  if (!opened) {
    const driver = CudaDriver.open(0, discoverOpts);
    opened = { driver, lt: CublasLt.open(driver, { ...discoverOpts, workspaceBytes: 1024 }) };
  }
  return opened;
}

/** Random values exactly representable in f16 (so every dtype sees the same numbers). */
function values(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return Math.round(((s >>> 8) / 2 ** 24 - 0.5) * 64) / 32;
  });
}

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
    const compiled = compileGraph(g, { fuse: true, emitters: { cuda: emitCUDA } });
    assert.ok(compiled.plan.kernels.every((k) => k.cudaGemm?.call.epilogue && !k.cudaGemm.epilogue));
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
