/**
 * The emitted CUDA, run on the CPU: every fusion case (cases/fusion_cases.ts, f32 and f16) is compiled to
 * a plan with CUDA kernels, the kernels are built as host C++ with g++ through a small shim (the CUDA
 * built-ins as plain C++: threadIdx/blockIdx, __syncthreads as a std::barrier across one OS thread per
 * CUDA thread, __shfl_xor_sync through an exchange array, half and bfloat16 conversions in software), the
 * plan's steps run in order, and every output is compared with the reference interpreter on the same
 * random inputs.
 *
 * What this checks: the spelling's semantics (operators, precedence, casts, rounding, index math,
 * vector loads and lanes, Philox, wg_reduce's warp butterfly and per-warp slots, barriers, shared memory)
 * on real kernels. What it cannot check: GPU-specific behaviour (memory model, warp scheduling, NVRTC).
 * Host libm stands in for CUDA's expf/tanhf (both within a few ulp), so tolerances are the WebGPU tests'.
 * Without g++ the test is reported as ignored.
 */
import assert from "node:assert/strict";
import { emitCUDA } from "../../compiler/codegen/cuda.ts";
import { compileGraph } from "../../compiler/compile.ts";
import { FUSION_CASES, graphOf, type Tolerance } from "../../cases/fusion_cases.ts";
import { type DType, type Graph, isFloat, numel } from "../../ir/mod.ts";
import type { ModelBuilder, Tensor } from "../../dsl/mod.ts";
import type { Plan, PlanBinding, PlanBuffer, PlanGemmOperand, TargetKernel } from "../../plan/plan.ts";
import { storedBytes } from "../../plan/plan.ts";
import { decodeBF16, decodeF16, encodeBF16, encodeF16 } from "../../numeric/half.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { uniformAt } from "../../numeric/philox.ts";
import { erf } from "../../numeric/erf.ts";
import { cudaPrelude } from "../../compiler/codegen/cuda_prelude.ts";
import { seededRandom } from "../../cases/random.ts";
import { batchFeeds, optimizerStepFeeds } from "../util/bert_feeds.ts";
import { buildModelGraph } from "../../compiler/model_graph.ts";
import type { Precision } from "../../compiler/passes/precision.ts";
import { loadModel } from "../../models/load.ts";
import { roundTripGraph } from "../../compiler/storage_precision.ts";

const CXX = Deno.env.get("CXX") ?? "g++";

async function cxxVersion(): Promise<string | undefined> {
  try {
    const out = await new Deno.Command(CXX, { args: ["--version"], stdout: "piped", stderr: "piped" })
      .output();
    return out.success ? new TextDecoder().decode(out.stdout).split("\n")[0] : undefined;
  } catch {
    return undefined;
  }
}
const version = await cxxVersion();
if (!version) console.log(`CUDA-on-CPU tests ignored: ${CXX} not found`);

// The tolerances of tests/util/fused_check.ts (one rounding per fused kernel vs one per op).
const F32_TOL: Tolerance = { rtol: 2e-5, atol: 1e-6 };
const F16_TOL: Tolerance = { rtol: 4e-3, atol: 1e-3 };

/** CUDA's device built-ins as host C++ (see the file comment). */
const SHIM = String.raw`
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
using std::max;
using std::min;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) alignas(n)
struct bf_dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local bf_dim3 threadIdx, blockIdx;
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned bf_bits(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline int __float2int_rz(float x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483648.0f) return INT32_MAX;
  if (x <= -2147483648.0f) return INT32_MIN;
  return int(x);
}
inline unsigned __float2uint_rz(float x) {
  if (std::isnan(x) || x <= 0.0f) return 0u;
  if (x >= 4294967296.0f) return UINT32_MAX;
  return unsigned(x);
}
struct __half { uint16_t bits; };
struct __nv_bfloat16 { uint16_t bits; };
inline float __half2float(__half h) {
  const unsigned s = (h.bits & 0x8000u) << 16, e = (h.bits >> 10) & 31u, m = h.bits & 1023u;
  if (e == 31u) return __uint_as_float(s | 0x7f800000u | (m << 13));
  if (e == 0u) return (s ? -1.0f : 1.0f) * std::ldexp(float(m), -24);
  return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}
inline __half __float2half_rn(float f) {
  const unsigned u = bf_bits(f), s = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (std::isnan(f)) return {uint16_t(s | 0x7e00u)};
  if (a >= 65520.0f) return {uint16_t(s | 0x7c00u)};
  if (a < 6.103515625e-05f) {  // subnormal: a multiple of 2^-24, rounded to nearest even
    const float q = std::nearbyint(a * 16777216.0f);
    return {uint16_t(s | unsigned(q))};
  }
  const unsigned au = u & 0x7fffffffu;
  unsigned r = au + 0xfffu + ((au >> 13) & 1u);  // round the 13 dropped bits to nearest even
  return {uint16_t(s | (((r >> 23) - 112u) << 10) | ((r >> 13) & 1023u))};
}
inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float(unsigned(b.bits) << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  const unsigned u = bf_bits(f);
  if (std::isnan(f)) return {uint16_t((u >> 16) | 0x40u)};
  return {uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
static std::barrier<>* bf_barrier;
inline void __syncthreads() { bf_barrier->arrive_and_wait(); }
template <typename T> T __shfl_xor_sync(unsigned, T v, int o, int) {
  static T slots[1024];
  slots[threadIdx.x] = v;
  __syncthreads();
  const T r = slots[threadIdx.x ^ unsigned(o)];
  __syncthreads();
  return r;
}
inline float bf_to_f32(float x) { return x; }
inline float bf_to_f32(__half x) { return __half2float(x); }
inline float bf_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
inline void bf_from_f32(float v, float* p) { *p = v; }
inline void bf_from_f32(float v, __half* p) { *p = __float2half_rn(v); }
inline void bf_from_f32(float v, __nv_bfloat16* p) { *p = __float2bfloat16_rn(v); }
// cuBLASLt's matmul as the plan describes it (plan/plan.ts PlanGemm): row-major, for batch q
// op(X)[i][j] = X[q*s + (trans ? j*ld + i : i*ld + j)], D[q][i][j] = D[q*sd + i*ldd + j], operands widened
// to f32, one f32 sum per element in increasing k, rounded once to D's type.
template <typename TA, typename TB, typename TD>
static void bf_gemm(long m, long n, long k, long batch, const TA* A, long lda, bool ta, long sa, const TB* B,
                    long ldb, bool tb, long sb, TD* D, long ldd, long sd) {
  for (long q = 0; q < batch; ++q)
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (long p = 0; p < k; ++p) {
          const float a = bf_to_f32(A[q * sa + (ta ? p * lda + i : i * lda + p)]);
          const float b = bf_to_f32(B[q * sb + (tb ? j * ldb + p : p * ldb + j)]);
          acc += a * b;
        }
        bf_from_f32(acc, &D[q * sd + i * ldd + j]);
      }
}
// Kernels without barriers run thread after thread; the others get one OS thread per CUDA thread.
static void bf_launch(unsigned blocks, unsigned threads, bool barriers, const std::function<void()>& f) {
  if (!barriers) {
    for (unsigned b = 0; b < blocks; ++b) {
      blockIdx.x = b;
      for (unsigned t = 0; t < threads; ++t) {
        threadIdx.x = t;
        f();
      }
    }
    return;
  }
  std::barrier<> bar(threads);
  bf_barrier = &bar;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      threadIdx.x = t;
      for (unsigned b = 0; b < blocks; ++b) {
        blockIdx.x = b;
        f();
        bar.arrive_and_wait();
      }
    });
  }
  for (auto& th : pool) th.join();
}
`;

const C_TYPE: Record<string, string> = {
  f32: "float",
  f16: "__half",
  bf16: "__nv_bfloat16",
  i32: "int",
  u32: "unsigned int",
  bool: "unsigned int",
};

/**
 * A C++ program running the plan's steps over buffers read from stdin, writing its outputs to stdout.
 * `library`: matmul kernels with a library variant run it (bf_gemm per the descriptor, then the epilogue
 * kernel), as the CUDA executor does by default.
 */
function program(plan: Plan, library = false): string {
  const sources = new Map<string, number>();
  const parts = [SHIM];
  const addSource = (code: string) => {
    if (sources.has(code)) return;
    sources.set(code, sources.size);
    parts.push(`#define bf_kernel bf_kernel_${sources.size - 1}\n${code}#undef bf_kernel\n`);
  };
  for (const k of plan.kernels) {
    addSource(k.cuda!.code);
    if (library && k.cudaGemm?.epilogue) addSource(k.cudaGemm.epilogue.cuda.code);
  }
  // Memory as the CUDA runtime lays it out: one zeroed block per memory-plan slot, each buffer at its
  // offset inside its slot (the parts of an in-place flat vector share the vector's slot). Only inputs and
  // parameters come from stdin, in plan order.
  const slotBytes = plan.slots.map((sl) => sl.bytes);
  for (const b of plan.buffers) {
    slotBytes[b.slot] = Math.max(slotBytes[b.slot], (b.offset ?? 0) + numel(b.shape) * storedBytes(b.dtype));
  }
  const at = (id: number) => `(slot[${plan.buffers[id].slot}].data() + ${plan.buffers[id].offset ?? 0})`;
  const main = [
    "int main() {",
    `  std::vector<std::vector<unsigned char>> slot(${plan.slots.length});`,
    ...slotBytes.map((n, i) => `  slot[${i}].assign(${Math.max(16, n + 16)}, 0);`),
    ...plan.buffers.filter((b) => b.role === "input" || b.role === "param").map((b) => {
      const n = numel(b.shape) * storedBytes(b.dtype);
      return `  if (std::fread(${at(b.id)}, 1, ${n}, stdin) != ${n}) return 2;`;
    }),
  ];
  for (const s of plan.steps) {
    if (s.op === "copy") {
      main.push(`  std::memcpy(${at(s.dst)}, ${at(s.src)}, ${s.bytes});`);
      continue;
    }
    const k = plan.kernels[s.kernel];
    const launch = (t: TargetKernel, bindings: readonly PlanBinding[]) => {
      const args = bindings.map((b) =>
        `reinterpret_cast<${C_TYPE[plan.buffers[b.buffer].dtype]}*>${at(b.buffer)}`
      );
      const barriers = /__syncthreads|__shfl_xor_sync/.test(t.code);
      main.push(
        `  bf_launch(${t.grid[0]}u, ${t.workgroupSize}u, ${barriers}, [&] { bf_kernel_${
          sources.get(t.code)
        }(${args.join(", ")}); });`,
      );
    };
    const lib = library ? k.cudaGemm : undefined;
    if (!lib) {
      launch(k.cuda!, k.bindings);
      continue;
    }
    const { call } = lib;
    const ptr = (o: PlanGemmOperand) =>
      `(reinterpret_cast<${C_TYPE[o.dtype]}*>${at(o.buffer)} + ${o.offset})`;
    const op = (o: PlanGemmOperand) => `${ptr(o)}, ${o.ld}, ${o.trans}, ${o.batchStride}`;
    main.push(
      `  bf_gemm(${call.m}, ${call.n}, ${call.k}, ${call.batch}, ${op(call.a)}, ${op(call.b)}, ${
        ptr(call.d)
      }, ` +
        `${call.d.ld}, ${call.d.batchStride});`,
    );
    if (lib.epilogue) launch(lib.epilogue.cuda, lib.epilogue.bindings);
  }
  for (const id of Object.values(plan.outputs)) {
    const b = plan.buffers[id];
    main.push(`  std::fwrite(${at(id)}, 1, ${numel(b.shape) * storedBytes(b.dtype)}, stdout);`);
  }
  main.push("  return 0;", "}");
  parts.push(main.join("\n"));
  return parts.join("\n");
}

function encode(b: PlanBuffer, data: ArrayLike<number> | undefined): Uint8Array {
  const n = numel(b.shape);
  if (!data) return new Uint8Array(n * storedBytes(b.dtype));
  switch (b.dtype) {
    case "f32":
      return new Uint8Array(Float32Array.from(data).buffer);
    case "f16":
      return new Uint8Array(encodeF16(data).buffer);
    case "bf16":
      return new Uint8Array(encodeBF16(data).buffer);
    case "i32":
      return new Uint8Array(Int32Array.from(data).buffer);
    case "u32":
      return new Uint8Array(Uint32Array.from(data).buffer);
    case "bool":
      return new Uint8Array(Uint32Array.from(data, (x) => (x ? 1 : 0)).buffer);
  }
}

function decode(b: PlanBuffer, bytes: Uint8Array): ArrayLike<number> {
  const n = numel(b.shape);
  const ab = bytes.slice().buffer;
  switch (b.dtype) {
    case "f32":
      return new Float32Array(ab, 0, n);
    case "f16":
      return decodeF16(new Uint16Array(ab, 0, n));
    case "bf16":
      return decodeBF16(new Uint16Array(ab, 0, n));
    case "i32":
      return new Int32Array(ab, 0, n);
    default:
      return new Uint32Array(ab, 0, n);
  }
}

/** Random feeds: normals for floats, small ints unless the case says otherwise (as fused_check does). */
function randomFeeds(
  g: Graph,
  seed: number,
  ints: Record<string, (r: ReturnType<typeof seededRandom>, i: number) => number> = {},
): Record<string, Float64Array> {
  const r = seededRandom(seed);
  const feeds: Record<string, Float64Array> = {};
  for (const n of g.nodes) {
    if (n.op !== "input" && n.op !== "param") continue;
    const name = String(n.attrs.name);
    const gen = ints[name];
    feeds[name] = Float64Array.from(
      { length: numel(n.type.shape) },
      (_, i) => gen ? gen(r, i) : isFloat(n.type.dtype) ? r.normal() : r.int(0, 4),
    );
  }
  return feeds;
}

async function runOnCpu(
  dir: string,
  plan: Plan,
  feeds: Record<string, ArrayLike<number>>,
  library = false,
) {
  const src = `${dir}/prog.cpp`;
  await Deno.writeTextFile(src, program(plan, library));
  // The generated code includes these headers; on the host the shim provides everything.
  await Deno.writeTextFile(`${dir}/cuda_fp16.h`, "");
  await Deno.writeTextFile(`${dir}/cuda_bf16.h`, "");
  const build = await new Deno.Command(CXX, {
    args: ["-std=c++20", "-O1", "-fno-strict-aliasing", "-pthread", `-I${dir}`, src, "-o", `${dir}/prog`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!build.success) {
    throw new Error(`g++ failed:\n${new TextDecoder().decode(build.stderr).slice(0, 8000)}`);
  }
  const byName = new Map<string, ArrayLike<number>>(Object.entries(feeds));
  const input: Uint8Array[] = plan.buffers.filter((b) => b.role === "input" || b.role === "param")
    .map((b) => encode(b, byName.get(b.name)));
  const child = new Deno.Command(`${dir}/prog`, { stdin: "piped", stdout: "piped", stderr: "piped" }).spawn();
  const writer = child.stdin.getWriter();
  for (const chunk of input) await writer.write(chunk);
  await writer.close();
  const out = await child.output();
  if (!out.success) throw new Error(`program failed (${out.code}): ${new TextDecoder().decode(out.stderr)}`);
  const results = new Map<string, ArrayLike<number>>();
  let at = 0;
  for (const [name, id] of Object.entries(plan.outputs)) {
    const b = plan.buffers[id];
    const bytes = numel(b.shape) * storedBytes(b.dtype);
    results.set(name, decode(b, out.stdout.subarray(at, at + bytes)));
    at += bytes;
  }
  return results;
}

/** |cuda - ref| <= atol + rtol * max|ref|, per output tensor (as tests/util/fused_check.ts). */
function compare(
  ref: Map<string, ArrayLike<number>>,
  got: Map<string, ArrayLike<number>>,
  tol: Tolerance,
  plan: Plan,
): void {
  for (const [name, expected] of ref) {
    const out = got.get(name);
    assert.ok(out, `missing output ${name}`);
    let maxRef = 0, maxErr = 0;
    for (let i = 0; i < expected.length; i++) {
      maxRef = Math.max(maxRef, Math.abs(expected[i]));
      const e = Math.abs(out[i] - expected[i]);
      if (!(e <= maxErr)) maxErr = Number.isNaN(e) ? Infinity : e;
    }
    const limit = tol.atol + tol.rtol * maxRef;
    assert.ok(
      maxErr <= limit,
      `${name}: max |cuda - ref| = ${maxErr.toExponential(3)} > ${limit.toExponential(3)} ` +
        `(max |ref| ${maxRef.toExponential(3)}, ${plan.kernels.length} kernels)`,
    );
    if (Deno.env.get("CUDA_CPU_VERBOSE")) {
      console.log(`${name}: ${maxErr.toExponential(3)} of ${limit.toExponential(3)}`);
    }
  }
}

for (const c of FUSION_CASES) {
  for (const dtype of c.dtypes) {
    Deno.test({
      name: `CUDA on the CPU vs reference (${dtype}): ${c.name}${version ? "" : " (g++ not found)"}`,
      ignore: !version,
      async fn() {
        const g = graphOf(c.name, c.body, dtype, c.backward);
        const feeds = randomFeeds(g, 1000 + FUSION_CASES.indexOf(c), c.ints);
        const tol = c.tol?.[dtype] ?? (dtype === "f16" ? F16_TOL : F32_TOL);
        const compiled = compileGraph(g, { fuse: true, emitters: { cuda: emitCUDA } });
        const ref = evaluate(g, feeds, { precision: "f32" });
        const dir = await Deno.makeTempDir({ prefix: "bertfuse-cuda-cpu-" });
        try {
          compare(ref, await runOnCpu(dir, compiled.plan, feeds), tol, compiled.plan);
        } finally {
          await Deno.remove(dir, { recursive: true });
        }
      },
    });
  }
}

// The library path (PlanKernel.cudaGemm: bf_gemm per the descriptor, then the epilogue kernel) on the
// fusion cases with a GEMM that qualifies, and on small graphs that exercise every descriptor field:
// transposed operands, leading dimensions wider than the matrix (a slice of rows), element offsets,
// batch strides (a 3-D batched product, attention heads through a permute at batch 1), epilogues.
const LIBRARY_CASES: { name: string; body: (m: ModelBuilder, dt: DType) => Tensor; backward: boolean }[] = [
  ...FUSION_CASES.filter((c) => c.name.startsWith("GEMM epilogue")),
  {
    name: "linear layer with a transposed weight, forward and backward",
    body: (m, dt) =>
      m.param("x", [5, 7], "zeros", dt).matmul(m.param("w", [6, 7], "zeros", dt), { transposeB: true })
        .add(m.param("bias", [6], "zeros", dt)).mul(0.5),
    backward: true,
  },
  {
    name: "a slice of rows (ld 32, offset 16) times a weight, forward and backward",
    body: (m, dt) =>
      m.param("x", [2, 4, 8], "zeros", dt).slice(1, 2, 3).reshape([2, 8])
        .matmul(m.param("w", [8, 3], "zeros", dt)),
    backward: true,
  },
  {
    name: "batched 3-D product with batch strides, forward and backward",
    body: (m, dt) => m.param("a", [3, 4, 5], "zeros", dt).matmul(m.param("b", [3, 5, 2], "zeros", dt)),
    backward: true,
  },
  {
    name: "attention heads through permutes at batch 1, forward and backward",
    body: (m, dt) => {
      const heads = (t: Tensor) => t.reshape([1, 4, 2, 3]).permute([0, 2, 1, 3]);
      const q = heads(m.param("q", [1, 4, 6], "zeros", dt));
      const k = heads(m.param("k", [1, 4, 6], "zeros", dt));
      const v = heads(m.param("v", [1, 4, 6], "zeros", dt));
      return q.matmul(k, { transposeB: true }).mul(0.25).matmul(v).permute([0, 2, 1, 3]).reshape([1, 4, 6]);
    },
    backward: true,
  },
];
for (const c of LIBRARY_CASES) {
  for (const dtype of ["f32", "f16"] as DType[]) {
    Deno.test({
      name: `CUDA on the CPU vs reference (${dtype}), library GEMMs: ${c.name}${
        version ? "" : " (g++ not found)"
      }`,
      ignore: !version,
      async fn() {
        const g = graphOf(c.name, c.body, dtype, c.backward);
        const feeds = randomFeeds(g, 2000 + LIBRARY_CASES.indexOf(c));
        const tol = dtype === "f16" ? F16_TOL : F32_TOL;
        const compiled = compileGraph(g, { fuse: true, emitters: { cuda: emitCUDA } });
        const lib = compiled.gemms.filter((d) => d.library).length;
        // Mixed plans (a GEMM whose operand is computed on load stays a template kernel) are fine.
        assert.ok(lib > 0, `some GEMM should go to the library: ${JSON.stringify(compiled.gemms)}`);
        const ref = evaluate(g, feeds, { precision: "f32" });
        const dir = await Deno.makeTempDir({ prefix: "bertfuse-cuda-cpu-" });
        try {
          compare(ref, await runOnCpu(dir, compiled.plan, feeds, true), tol, compiled.plan);
        } finally {
          await Deno.remove(dir, { recursive: true });
        }
      },
    });
  }
}

// A whole model: BERT-tiny inference (classification head, one short sequence) in each precision.
// Tolerances are per output tensor, relative to its largest value; the reference rounds every op, a
// fused kernel once, so the gap grows with depth and with narrower storage.
const MODEL_TOL: Record<Precision, Tolerance> = {
  fp32: { rtol: 1e-4, atol: 1e-5 },
  fp16: { rtol: 1e-2, atol: 1e-3 },
  bf16: { rtol: 3e-2, atol: 1e-2 },
};
for (
  const [precision, library] of (["fp32", "fp16", "bf16"] as Precision[]).flatMap((p) =>
    [[p, false], [p, true]] as const
  )
) {
  Deno.test({
    name: `CUDA on the CPU vs reference: BERT-tiny inference, ${precision}${
      library ? ", library GEMMs" : ""
    }${version ? "" : " (g++ not found)"}`,
    ignore: !version,
    async fn() {
      const model = await loadModel("models/bert-tiny.ts");
      const g = buildModelGraph({
        model,
        mode: "infer",
        head: "classification",
        precision,
        batchSize: 1,
        seqLen: 8,
      });
      const feeds = randomFeeds(g, 77, {
        input_ids: (r) => r.int(0, 1000),
        token_type_ids: (r) => r.int(0, 2),
        attention_mask: (_, i) => (i < 6 ? 1 : 0),
      });
      const compiled = compileGraph(g, { fuse: true, emitters: { cuda: emitCUDA } });
      const ref = evaluate(g, feeds, { precision: "f32" });
      const dir = await Deno.makeTempDir({ prefix: "bertfuse-cuda-cpu-" });
      try {
        if (library) logLibrary(compiled.gemms);
        compare(ref, await runOnCpu(dir, compiled.plan, feeds, library), MODEL_TOL[precision], compiled.plan);
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

// A whole training step — forward, backward with dropout, the fused LAMB update over the flat parameter
// vector (in-place concats at plan offsets), loss scaling — on the small HF fixture configuration.
for (
  const [precision, library] of (["fp32", "fp16", "bf16"] as Precision[]).flatMap((p) =>
    [[p, false], [p, true]] as const
  )
) {
  Deno.test({
    name: `CUDA on the CPU vs reference: a BERT training step with LAMB, ${precision}${
      library ? ", library GEMMs" : ""
    }${version ? "" : " (g++ not found)"}`,
    ignore: !version,
    async fn() {
      const model = await loadModel("tests/fixtures/hf-tiny/pretraining/config.json");
      const [B, S, P] = [2, 8, 3];
      const g = buildModelGraph({
        model,
        mode: "train",
        precision,
        batchSize: B,
        seqLen: S,
        maxPredictions: P,
        optimizer: { kind: "lamb", dynamicScale: precision === "fp16" },
      });
      const r = seededRandom(91);
      const feeds = {
        ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: model.config.vocab_size }, r, 3),
        ...optimizerStepFeeds(g, r, precision === "fp16" ? 1024 : 1),
      };
      const compiled = compileGraph(g, { fuse: true, emitters: { cuda: emitCUDA } });
      // With low-precision storage the interpreter gets the plan's own roundings.
      const refGraph = precision === "fp32"
        ? g
        : roundTripGraph(compiled.graph, compiled.fusion, compiled.storage);
      const ref = evaluate(refGraph, feeds, { precision: "f32" });
      const dir = await Deno.makeTempDir({ prefix: "bertfuse-cuda-cpu-" });
      try {
        const tol = precision === "fp32"
          ? { rtol: 2e-4, atol: 1e-6 }
          : precision === "fp16"
          ? F16_TOL
          : MODEL_TOL.bf16;
        if (library) {
          logLibrary(compiled.gemms);
          assert.ok(compiled.gemms.some((d) => d.library), "some GEMMs of a training step go to the library");
        }
        compare(ref, await runOnCpu(dir, compiled.plan, feeds, library), tol, compiled.plan);
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

/** How many GEMMs ran as library calls (CUDA_CPU_VERBOSE=1). */
function logLibrary(gemms: readonly { library: boolean }[]): void {
  if (Deno.env.get("CUDA_CPU_VERBOSE")) {
    console.log(`library GEMMs: ${gemms.filter((d) => d.library).length} of ${gemms.length}`);
  }
}

Deno.test({
  name: `CUDA on the CPU: the Philox prelude is the reference's stream bit for bit${
    version ? "" : " (g++ not found)"
  }`,
  ignore: !version,
  async fn() {
    const r = seededRandom(9);
    // Site words across the whole u32 range (the carries of the 64-bit products), indices to 2^32 - 1.
    const sites = Array.from({ length: 200 }, (_, i) => {
      const index = i < 100 ? r.u32() : i;
      return [r.u32(), i % 3 === 0 ? 0xffffffff : r.u32(), r.u32(), (index & ~3) >>> 0] as const;
    });
    const prelude = cudaPrelude({
      helpers: new Set(["bf_philox", "bf_philox4"]),
      reductions: new Map(),
      warpWidth: 32,
      warps: 1,
    });
    const main = [
      "int main() {",
      "  unsigned s[4];",
      '  while (std::scanf("%u %u %u %u", &s[0], &s[1], &s[2], &s[3]) == 4) {',
      "    const float4 q = bf_philox4(s[0], s[1], s[2], s[3]);",
      '    std::printf("%u %u %u %u", bf_bits(q.x), bf_bits(q.y), bf_bits(q.z), bf_bits(q.w));',
      '    for (unsigned j = 0; j < 4; ++j) std::printf(" %u", bf_bits(bf_philox(s[0], s[1], s[2], s[3] + j)));',
      '    std::printf("\\n");',
      "  }",
      "}",
    ].join("\n");
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-philox-" });
    try {
      await Deno.writeTextFile(`${dir}/p.cpp`, `${SHIM}\n${prelude}\n${main}\n`);
      const build = await new Deno.Command(CXX, {
        args: ["-std=c++20", "-O1", "-pthread", `${dir}/p.cpp`, "-o", `${dir}/p`],
        stderr: "piped",
      }).output();
      assert.ok(build.success, new TextDecoder().decode(build.stderr));
      const child = new Deno.Command(`${dir}/p`, { stdin: "piped", stdout: "piped" }).spawn();
      const w = child.stdin.getWriter();
      await w.write(new TextEncoder().encode(sites.map((x) => x.join(" ")).join("\n") + "\n"));
      await w.close();
      const lines = new TextDecoder().decode((await child.output()).stdout).trim().split("\n");
      assert.equal(lines.length, sites.length);
      sites.forEach(([seed, step, stream, index], i) => {
        const got = lines[i].split(" ").map(Number);
        // The float's bits: every uniform is exact in f32, so they must be equal, not close.
        const want = [0, 1, 2, 3].map((j) =>
          new Uint32Array(Float32Array.of(uniformAt(seed, step, stream, index + j)).buffer)[0]
        );
        assert.deepEqual(got, [...want, ...want], `site ${[seed, step, stream, index]}`);
      });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: `CUDA on the CPU: the erf prelude is within 2e-7 of numeric/erf.ts${
    version ? "" : " (g++ not found)"
  }`,
  ignore: !version,
  async fn() {
    const prelude = cudaPrelude({
      helpers: new Set(["bf_erf"]),
      reductions: new Map(),
      warpWidth: 32,
      warps: 1,
    });
    const main = [
      "int main() {",
      '  for (int i = -5000; i <= 5000; ++i) std::printf("%.9g\\n", bf_erf(i * 0.001f));',
      "}",
    ].join("\n");
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-erf-" });
    try {
      await Deno.writeTextFile(`${dir}/e.cpp`, `${SHIM}\n${prelude}\n${main}\n`);
      const build = await new Deno.Command(CXX, {
        args: ["-std=c++20", "-O1", "-pthread", `${dir}/e.cpp`, "-o", `${dir}/e`],
        stderr: "piped",
      }).output();
      assert.ok(build.success, new TextDecoder().decode(build.stderr));
      const out = await new Deno.Command(`${dir}/e`, { stdout: "piped" }).output();
      const got = new TextDecoder().decode(out.stdout).trim().split("\n").map(Number);
      let worst = 0;
      got.forEach((y, i) => (worst = Math.max(worst, Math.abs(y - erf(Math.fround((i - 5000) * 0.001))))));
      assert.ok(worst <= 2e-7, `max |bf_erf - erf| = ${worst}`);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
