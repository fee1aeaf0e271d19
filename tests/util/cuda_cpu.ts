/**
 * The emitted CUDA, run on the CPU: a plan's CUDA kernels built as host C++ with g++ through a small shim
 * (the CUDA built-ins as plain C++: threadIdx/blockIdx, a block's CUDA threads as fibers of one OS thread
 * that __syncthreads switches round-robin, __shfl_xor_sync through an exchange array, half and bfloat16
 * conversions in software), the plan's steps run in order over its memory plan, outputs read back. Shared by
 * tests/nvcc/cuda_emit_cpu.test.ts and the fuzzer (tests/nvcc/fuzz.test.ts, tools/fuzz.ts).
 *
 * What this checks: the spelling's semantics (operators, precedence, casts, rounding, index math, vector
 * loads and lanes, Philox, wg_reduce's warp butterfly and per-warp slots, barriers, shared memory) on real
 * kernels. What it cannot check: GPU-specific behaviour (memory model, warp scheduling, NVRTC). Host libm
 * stands in for CUDA's expf/tanhf (both within a few ulp).
 */
import { dirname } from "node:path";
import { type Graph, numel } from "../../ir/mod.ts";
import type { Plan, PlanBinding, PlanBuffer, PlanGemmOperand, TargetKernel } from "../../plan/plan.ts";
import { storedBytes, UPDATE_PREFIX } from "../../plan/plan.ts";
import type { Compiled } from "../../compiler/driver/compile.ts";
import { roundTripGraph } from "../../compiler/storage/storage_precision.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { withLowCopyFeeds } from "../../plan/low_copies.ts";
import { decodeBF16, decodeF16, encodeBF16, encodeF16 } from "../../numeric/half.ts";
import { LT_CPU, ltCallCpp } from "./lt_cpu.ts";

export const CXX = Deno.env.get("CXX") ?? "g++";

/** The host compiler's version line, or undefined when there is none. */
export async function cxxVersion(): Promise<string | undefined> {
  try {
    const out = await new Deno.Command(CXX, { args: ["--version"], stdout: "piped", stderr: "piped" })
      .output();
    return out.success ? new TextDecoder().decode(out.stdout).split("\n")[0] : undefined;
  } catch {
    return undefined;
  }
}
/** CUDA's device built-ins as host C++ (see the file comment). */
export const SHIM = String.raw`
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <atomic>
#include <ucontext.h>
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
// A barrier hands over to the next CUDA thread's fiber, the last one's back to the first, past a barrier all
// reached: a context switch, where an OS thread per CUDA thread (129 runnable on two cores) paid a futex wake.
static unsigned bf_threads = 1;
static ucontext_t* bf_fibers;  // one per CUDA thread, then the launching context
inline void __syncthreads() {
  const unsigned me = threadIdx.x, next = me + 1 == bf_threads ? 0 : me + 1;
  threadIdx.x = next, swapcontext(&bf_fibers[me], &bf_fibers[next]), threadIdx.x = me;
}
template <typename T> T __shfl_xor_sync(unsigned, T v, int o, int) {
  static T slots[1024];
  slots[threadIdx.x] = v;
  __syncthreads();
  const T r = slots[threadIdx.x ^ unsigned(o)];
  __syncthreads();
  return r;
}
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
// Tensor-core fragments (the prelude's bf_mma_m16n8k16 and bf_ldmatrix_*, inline PTX on a GPU) emulated
// as warp collectives with the PTX ISA's fragment layouts (see compiler/codegen/cuda_prelude.ts): each
// lane publishes its registers (or its row address), one block barrier, then each lane computes its own
// result from its warp's published values. Two exchange buffers alternate between calls, so one barrier
// per call suffices: a buffer is written again two calls later, after a barrier every reader has passed.
// As with __shfl_xor_sync here, every thread of the block must make the same calls.
#define BF_MMA_M16N8K16_DEFINED
#define BF_LDMATRIX_X4_DEFINED
#define BF_LDMATRIX_X4_TRANS_DEFINED
#define BF_LDMATRIX_X2_DEFINED
#define BF_LDMATRIX_X2_TRANS_DEFINED
static unsigned bf_parity[1024];
#define bf_frag_parity bf_parity[threadIdx.x]
// Warp-level mma instructions executed (one per 32 lane calls), for tests that check a FLOP count.
static std::atomic<unsigned long long> bf_mma_lane_calls{0};
inline float bf_half_of(unsigned reg, unsigned hi) { return __half2float({uint16_t(hi ? reg >> 16 : reg & 0xffffu)}); }
// A·B + C with f16 products (exact in f32) summed in f32 in k order onto C: one valid order of the
// hardware's; results agree with the GPU's to f32 rounding.
inline void bf_mma_m16n8k16(float* c, const unsigned* a, const unsigned* b) {
  struct Regs { unsigned a[4], b[2]; };
  static Regs slots[2][1024];
  const unsigned p = bf_frag_parity, t = threadIdx.x;
  bf_frag_parity ^= 1u;
  bf_mma_lane_calls.fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < 4; ++i) slots[p][t].a[i] = a[i];
  for (int i = 0; i < 2; ++i) slots[p][t].b[i] = b[i];
  __syncthreads();
  const unsigned warp = t & ~31u, lane = t & 31u, g = lane >> 2, q = lane & 3u;
  // A(row, k) lives in lane 4·(row % 8) + (k % 8) / 2, register (row / 8) + 2·(k / 8), half k % 2.
  auto A = [&](unsigned row, unsigned k) {
    return bf_half_of(slots[p][warp + (row & 7u) * 4 + ((k & 7u) >> 1)].a[(row >> 3) + 2 * (k >> 3)], k & 1u);
  };
  // B(k, n) lives in lane 4·n + (k % 8) / 2, register k / 8, half k % 2.
  auto B = [&](unsigned k, unsigned n) {
    return bf_half_of(slots[p][warp + n * 4 + ((k & 7u) >> 1)].b[k >> 3], k & 1u);
  };
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned row = g + 8 * (i >> 1), col = 2 * q + (i & 1u);
    float acc = c[i];
    for (unsigned k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    c[i] = acc;
  }
}
// ldmatrix of n 8x8 matrices: lane 8i + r gave the address of row r of matrix i.
inline void bf_ldmatrix_n(unsigned* r, const __half* row, unsigned n, bool trans) {
  static const __half* rows[2][1024];
  const unsigned p = bf_frag_parity, t = threadIdx.x;
  bf_frag_parity ^= 1u;
  rows[p][t] = row;
  __syncthreads();
  const unsigned warp = t & ~31u, lane = t & 31u, g = lane >> 2, q = lane & 3u;
  for (unsigned i = 0; i < n; ++i) {
    // Without .trans: row g, columns 2q and 2q+1; with .trans: rows 2q and 2q+1, column g.
    const uint16_t lo = trans ? rows[p][warp + 8 * i + 2 * q][g].bits : rows[p][warp + 8 * i + g][2 * q].bits;
    const uint16_t hi = trans ? rows[p][warp + 8 * i + 2 * q + 1][g].bits : rows[p][warp + 8 * i + g][2 * q + 1].bits;
    r[i] = unsigned(lo) | (unsigned(hi) << 16);
  }
}
inline void bf_ldmatrix_x4(unsigned* r, const __half* row) { bf_ldmatrix_n(r, row, 4, false); }
inline void bf_ldmatrix_x4_trans(unsigned* r, const __half* row) { bf_ldmatrix_n(r, row, 4, true); }
inline void bf_ldmatrix_x2(unsigned* r, const __half* row) { bf_ldmatrix_n(r, row, 2, false); }
inline void bf_ldmatrix_x2_trans(unsigned* r, const __half* row) { bf_ldmatrix_n(r, row, 2, true); }
inline float bf_to_f32(float x) { return x; }
inline float bf_to_f32(__half x) { return __half2float(x); }
inline float bf_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
inline void bf_from_f32(float v, float* p) { *p = v; }
inline void bf_from_f32(float v, __half* p) { *p = __float2half_rn(v); }
inline void bf_from_f32(float v, __nv_bfloat16* p) { *p = __float2bfloat16_rn(v); }
// Kernels without barriers run thread after thread; the others as a fiber per CUDA thread running every
// block, a barrier after each; then each fiber returns into the next one's last barrier (uc_link), the last
// into the launch. A plain function pointer, not a std::function of a lambda: one instantiation per launch
// site made g++ spend most of its time on a plan of a few hundred kernels.
static void (*bf_body)();
static unsigned bf_blocks;
static void bf_fiber() { for (unsigned b = 0; b < bf_blocks; ++b) blockIdx.x = b, bf_body(), __syncthreads(); }
static void bf_launch(unsigned blocks, unsigned threads, bool barriers, void (*f)()) {
  if (!barriers) {
    for (unsigned b = 0; b < blocks; ++b)
      for (unsigned t = 0; t < threads; ++t) blockIdx.x = b, threadIdx.x = t, f();
    return;
  }
  const size_t stack = 256 << 10;  // kept for later launches; untouched pages cost nothing
  static std::vector<char*> stacks;
  while (stacks.size() < threads) stacks.push_back(static_cast<char*>(std::malloc(stack)));
  std::vector<ucontext_t> fibers(threads + 1);
  bf_fibers = fibers.data(), bf_threads = threads, bf_body = f, bf_blocks = blocks;
  for (unsigned t = 0; t < threads; ++t) {
    getcontext(&fibers[t]);
    fibers[t].uc_stack = {stacks[t], 0, stack}, fibers[t].uc_link = &fibers[t + 1];
    makecontext(&fibers[t], bf_fiber, 0);
  }
  threadIdx.x = 0, swapcontext(&fibers[threads], &fibers[0]);
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
 * `library`: matmul kernels with a library variant run it (bf_lt_matmul with LtCall's column-major descriptors, then the epilogue
 * kernel), as the CUDA executor does by default.
 */
export function program(plan: Plan, library = false): string {
  const sources = new Map<string, number>();
  const parts = [SHIM, LT_CPU];
  const addSource = (code: string) => {
    if (sources.has(code)) return;
    sources.set(code, sources.size);
    parts.push(`#define bf_kernel bf_kernel_${sources.size - 1}\n${code}#undef bf_kernel\n`);
  };
  for (const k of plan.kernels) {
    addSource(k.source!.code);
    if (library && k.library?.epilogue) addSource(k.library.epilogue.source.code);
  }
  // Memory as the CUDA runtime lays it out: one zeroed block per memory-plan slot, each buffer at its
  // offset inside its slot (the parts of an in-place flat vector share the vector's slot). Only inputs and
  // parameters come from stdin, in plan order.
  const slotBytes = plan.slots.map((sl) => sl.bytes);
  for (const b of plan.buffers) {
    slotBytes[b.slot] = Math.max(slotBytes[b.slot], (b.offset ?? 0) + numel(b.shape) * storedBytes(b.dtype));
  }
  const at = (id: number) => `(slot[${plan.buffers[id].slot}].data() + ${plan.buffers[id].offset ?? 0})`;
  // Each launch is a function of its own over the global slots, passed to bf_launch by pointer.
  const launchers = [`static std::vector<unsigned char> slot[${Math.max(1, plan.slots.length)}];`];
  const main = [
    "int main() {",
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
      const barriers = /__syncthreads|__shfl_xor_sync|bf_mma_|bf_ldmatrix_/.test(t.code);
      const fn = `bf_step_${launchers.length}`;
      launchers.push(`static void ${fn}() { bf_kernel_${sources.get(t.code)}(${args.join(", ")}); }`);
      main.push(`  bf_launch(${t.grid[0]}u, ${t.workgroupSize}u, ${barriers}, ${fn});`);
    };
    const lib = library ? k.library : undefined;
    if (!lib) {
      launch(k.source!, k.bindings);
      continue;
    }
    const { call } = lib;
    // A call in groups (plan/plan.ts) is one strided-batched call per group, as the CUDA runtime runs it.
    const groups = call.outer ?? 1;
    for (let g = 0; g < groups; g++) {
      const ptr = (o: PlanGemmOperand) =>
        `(reinterpret_cast<${C_TYPE[o.dtype]}*>${at(o.buffer)} + ${o.offset + g * (o.outerStride ?? 0)})`;
      // Through cuBLASLt's column-major definition with LtCall's descriptors (tests/util/lt_cpu.ts).
      // A BIAS epilogue's vector: the same for every group (plan/plan.ts PlanGemmEpilogue).
      const ep = call.epilogue;
      const bias = ep &&
        `(reinterpret_cast<const ${C_TYPE[ep.bias.dtype]}*>${at(ep.bias.buffer)} + ${ep.bias.offset})`;
      // C (beta 1): stepped per group like D (plan/plan.ts PlanGemm.c).
      main.push(`  ${ltCallCpp(call, ptr(call.a), ptr(call.b), ptr(call.d), bias, call.c && ptr(call.c))}`);
    }
    if (lib.epilogue) launch(lib.epilogue.source, lib.epilogue.bindings);
  }
  // After the step, as the runtimes do: each update copied over what it updates (an update written in
  // place, compiler/stages/in_place_updates.ts, has none), so an output that is also updated reads as the
  // state the step leaves.
  for (const u of plan.updates) {
    const b = plan.buffers[u.value];
    main.push(`  std::memcpy(${at(u.param)}, ${at(u.value)}, ${numel(b.shape) * storedBytes(b.dtype)});`);
  }
  for (const id of Object.values(plan.outputs)) {
    const b = plan.buffers[id];
    main.push(`  std::fwrite(${at(id)}, 1, ${numel(b.shape) * storedBytes(b.dtype)}, stdout);`);
  }
  main.push("  return 0;", "}");
  parts.push(launchers.join("\n"), main.join("\n"));
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

/**
 * Builds `body` (C++ after the shim: kernels and a main) in `dir` with g++, runs it with `stdin` and
 * returns its stdout: for tests that launch hand-made kernels (tensor-core fragments, flash attention).
 */
export async function runSourceOnCpu(
  dir: string,
  body: string,
  stdin: Uint8Array,
  optimize = "-O1",
): Promise<Uint8Array> {
  await buildProgram(dir, `${SHIM}\n${body}`, optimize);
  const child = new Deno.Command(`${dir}/prog`, { stdin: "piped", stdout: "piped", stderr: "piped" }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(stdin);
  await writer.close();
  const out = await child.output();
  if (!out.success) throw new Error(`program failed (${out.code}): ${new TextDecoder().decode(out.stderr)}`);
  return out.stdout;
}

const cxxFlags = (optimize: string) => ["-std=c++20", optimize, "-fno-strict-aliasing", "-pthread"];
/** Whether `f` returns true without throwing: a stat of what may be absent, a removal that may fail. */
function holds(f: () => boolean | void): boolean {
  try {
    return f() !== false;
  } catch {
    return false;
  }
}
/**
 * The shim (with LT_CPU after it, as program() writes it, or alone) as a header precompiled once per
 * process and flags: parsing its C++ headers took 1.2 to 1.5 s of each g++ run. A test process's modules
 * share the folder (BERTFUSE_SHIM_PCH names it to them); a folder whose process has ended goes when the
 * next one is made. Where the precompiled header does not fit (another compiler, other flags), g++ reads
 * the header's text: the same program.
 */
const HEADS = [`${SHIM}\n${LT_CPU}`, SHIM], headers = new Map<string, Promise<string>>();
function headerDir(): string {
  const given = Deno.env.get("BERTFUSE_SHIM_PCH"),
    isDir = (p: string) => holds(() => Deno.statSync(p).isDirectory);
  if (given && isDir(given)) return given;
  const dir = Deno.makeTempDirSync({ prefix: `bertfuse-shim-pch-${Deno.pid}-` }), tmp = dirname(dir);
  for (const e of isDir("/proc/self") ? Deno.readDirSync(tmp) : []) {
    const pid = e.name.match(/^bertfuse-shim-pch-(\d+)-/)?.[1];
    if (pid && !isDir(`/proc/${pid}`)) holds(() => Deno.removeSync(`${tmp}/${e.name}`, { recursive: true }));
  }
  Deno.env.set("BERTFUSE_SHIM_PCH", dir);
  return dir;
}
async function buildHeader(head: number, optimize: string): Promise<string> {
  const path = `${headerDir()}/shim${head}${optimize}.h`, tmp = `${path}.${crypto.randomUUID()}.h`;
  if (holds(() => Deno.statSync(`${path}.gch`).isFile)) return path;
  await Deno.writeTextFile(tmp, HEADS[head]);
  const args = [...cxxFlags(optimize), "-x", "c++-header", tmp, "-o", `${tmp}.gch`];
  await new Deno.Command(CXX, { args, stdout: "null", stderr: "null" }).output();
  // Each file in one step, the precompiled one last (where g++ made it).
  await Deno.rename(tmp, path);
  await Deno.rename(`${tmp}.gch`, `${path}.gch`).catch(() => {});
  return path;
}
function shimHeader(head: number, optimize: string): Promise<string> {
  if (!headers.has(`${head}${optimize}`)) headers.set(`${head}${optimize}`, buildHeader(head, optimize));
  return headers.get(`${head}${optimize}`)!;
}

/** Compiles `source` (shim included) with g++ into `dir`/prog. */
async function buildProgram(dir: string, source: string, optimize: string): Promise<void> {
  const src = `${dir}/prog.cpp`, head = HEADS.findIndex((h) => source.startsWith(h));
  const text = head < 0
    ? source
    : `#include "${await shimHeader(head, optimize)}"\n${source.slice(HEADS[head].length)}`;
  await Deno.writeTextFile(src, text);
  // The generated code includes these headers; on the host the shim provides everything.
  await Deno.writeTextFile(`${dir}/cuda_fp16.h`, "");
  await Deno.writeTextFile(`${dir}/cuda_bf16.h`, "");
  const build = await new Deno.Command(CXX, {
    args: [...cxxFlags(optimize), `-I${dir}`, src, "-o", `${dir}/prog`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!build.success) {
    throw new Error(`g++ failed:\n${new TextDecoder().decode(build.stderr).slice(0, 8000)}`);
  }
}

/** Builds the plan's program in `dir` with g++, runs it on `feeds` and returns its outputs by name. */
export async function runOnCpu(
  dir: string,
  plan: Plan,
  feeds: Record<string, ArrayLike<number>>,
  library = false,
  optimize = "-O1",
) {
  await buildPlanOnCpu(dir, plan, library, optimize);
  return await runBuiltPlan(dir, plan, feeds);
}

/** Builds the plan's program in `dir` with g++, for runBuiltPlan to run as many steps as a test needs. */
export async function buildPlanOnCpu(dir: string, plan: Plan, library = false, optimize = "-O1") {
  await buildProgram(dir, program(plan, library), optimize);
}

/** Runs the program buildPlanOnCpu built in `dir` on `feeds` (one step) and returns its outputs by name. */
export async function runBuiltPlan(dir: string, plan: Plan, feeds: Record<string, ArrayLike<number>>) {
  // A weight copy the feeds do not give takes its weight's values, as the runtime's writes do
  // (engine/low_copy_refresh.ts).
  const byName = new Map<string, ArrayLike<number>>(Object.entries(withLowCopyFeeds(plan, feeds)));
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

/**
 * Outputs as a runtime reads them after a step: an output the step also updates (`flat.params` beside
 * `new:flat.params`) holds its new value, whether updated by a copy or in place (stages/in_place_updates.ts).
 */
export const afterStep = <T>(raw: Map<string, T>) =>
  new Map([...raw].map(([name, v]) => [name, raw.get(UPDATE_PREFIX + name) ?? v]));

/**
 * The interpreter's answer for a compiled plan, after the step: `graph` (by default the compiled graph with
 * the plan's own roundings) fed the weight copies the runtime derives (engine/low_copy_refresh.ts).
 */
export function planReference(
  c: Compiled,
  feeds: Record<string, ArrayLike<number>>,
  graph: Graph = roundTripGraph(c.graph, c.fusion, c.storage),
) {
  return afterStep(evaluate(graph, withLowCopyFeeds(c.plan, feeds), { precision: "f32" }));
}
