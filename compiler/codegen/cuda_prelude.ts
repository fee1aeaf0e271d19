/**
 * CUDA helper functions the emitter calls: erf (the WGSL prelude's own polynomial, so both targets compute
 * the same function), Philox (bit-identical to numeric/philox.ts), the half vector type of f16 vector
 * bindings, and the warp/block reductions of wg_reduce. Only the helpers a kernel uses are emitted, in a
 * fixed order, each `static` and include-guarded so kernels paste into one translation unit. Why tanhf is
 * called as is: DESIGN.md, notes: compiler/codegen/cuda_prelude.ts.
 */
import { ERF_LARGE, ERF_SMALL } from "./wgsl_prelude.ts";

export type CudaHelper =
  | "bf_erf"
  | "bf_philox_block"
  | "bf_philox"
  | "bf_philox4"
  | "bf_half4"
  | "bf_pack_half2"
  | "bf_mma_m16n8k16"
  | "bf_ldmatrix_x4"
  | "bf_ldmatrix_x4_trans"
  | "bf_ldmatrix_x2"
  | "bf_ldmatrix_x2_trans";

/** A warp (butterfly) or block (fold of per-warp slots) reduction helper for one op and type. */
export interface ReduceHelper {
  readonly op: "sum" | "max";
  /** C type of the values. */
  readonly type: string;
  /** The combining expression of `a` and `b` in that type (`a + b`, `fmaxf(a, b)` ...). */
  readonly combine: string;
}

const guarded = (name: string, text: string) =>
  `#ifndef ${name.toUpperCase()}_DEFINED\n#define ${name.toUpperCase()}_DEFINED\n${text}\n#endif`;

/** Horner evaluation of Σ coeffs[i]·u^i into `acc`, term by term as the WGSL prelude writes it. */
function horner(coeffs: readonly number[], u: string, acc: string): string {
  const f = (c: number) => `${Math.abs(c)}f`;
  const lines = [`  float ${acc} = ${coeffs[coeffs.length - 1]}f;`];
  for (let i = coeffs.length - 2; i >= 0; i--) {
    const c = coeffs[i];
    lines.push(`  ${acc} = ${acc} * ${u} ${c < 0 ? "-" : "+"} ${f(c)};`);
  }
  return lines.join("\n");
}

// The WGSL prelude's erf (compiler/codegen/wgsl_prelude.ts), operation for operation: CUDA's erff would
// be as accurate, but the two targets should compute the same function, not two different ones 1e-7
// apart. (expf and the GPU's rounding of the polynomial may still differ in the last bits.)
const ERF = `// erf(x) to ~1e-7, the WGSL prelude's polynomial: |x| < 1 as x * P(2x^2 - 1);
// 1 <= |x| <= 4 as 1 - exp(-x^2) * Q((1/x - 0.625) / 0.375); beyond 4, +-1. Both branches are computed.
static __device__ __forceinline__ float bf_erf(float x) {
  const float a = fminf(fabsf(x), 4.0f);
  const float u_small = 2.0f * a * a - 1.0f;
${horner(ERF_SMALL, "u_small", "p")}
  const float u_large = (1.0f / fmaxf(a, 1.0f) - 0.625f) * (1.0f / 0.375f);
${horner(ERF_LARGE, "u_large", "q")}
  const float r = a < 1.0f ? a * p : 1.0f - expf(-a * a) * q;
  return x < 0.0f ? -r : r;
}`;

// __umulhi gives the high word of the 64-bit product; the low word is the ordinary u32 product. Same
// rounds, constants and key bumps as runtime/numeric/philox.ts and the WGSL prelude.
const PHILOX_BLOCK =
  `// Philox4x32-10 of counter (index / 4, 0, step, 0) and key (seed, stream): the project's dropout
// stream (runtime/numeric/philox.ts).
static __device__ __forceinline__ uint4 bf_philox_block(unsigned int seed, unsigned int step,
                                                        unsigned int stream, unsigned int index) {
  unsigned int c0 = index >> 2, c1 = 0u, c2 = step, c3 = 0u, k0 = seed, k1 = stream;
#pragma unroll
  for (int i = 0; i < 10; ++i) {
    const unsigned int hi0 = __umulhi(c0, 0xd2511f53u), lo0 = c0 * 0xd2511f53u;
    const unsigned int hi1 = __umulhi(c2, 0xcd9e8d57u), lo1 = c2 * 0xcd9e8d57u;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9e3779b9u;
    k1 += 0xbb67ae85u;
  }
  return make_uint4(c0, c1, c2, c3);
}`;

// 24 random bits to [0, 1): exact in f32, so every backend gets the same float.
const PHILOX = `// The uniform of element index: word index % 4 of its block, (bits >> 8) * 2^-24.
static __device__ __forceinline__ float bf_philox(unsigned int seed, unsigned int step, unsigned int stream,
                                                  unsigned int index) {
  const uint4 w = bf_philox_block(seed, step, stream, index);
  const unsigned int j = index & 3u;
  const unsigned int bits = j == 0u ? w.x : j == 1u ? w.y : j == 2u ? w.z : w.w;
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}`;

const PHILOX4 =
  `// The uniforms of elements index..index+3 (index a multiple of 4): the four words of one block.
static __device__ __forceinline__ float4 bf_philox4(unsigned int seed, unsigned int step, unsigned int stream,
                                                    unsigned int index) {
  const uint4 w = bf_philox_block(seed, step, stream, index);
  const float s = 1.0f / 16777216.0f;
  return make_float4(static_cast<float>(w.x >> 8) * s, static_cast<float>(w.y >> 8) * s,
                     static_cast<float>(w.z >> 8) * s, static_cast<float>(w.w >> 8) * s);
}`;

// CUDA has no four-half vector type; this one is 8 bytes and 8-aligned, so a load or store of it is one
// 64-bit access, and its lanes read like float4's. A kernel that only loads f16 vectors (a library GEMM's
// epilogue reading an f16 scratch into f32 outputs) never builds one: bf_make_half4 is marked unused so
// nvcc's unused-function warning (an error under -Werror all-warnings) stays quiet.
const HALF4 = `// Four halves, one 8-byte access (f16 vector bindings).
struct __align__(8) bf_half4 {
  __half x, y, z, w;
};
static __device__ __forceinline__ __attribute__((unused)) bf_half4 bf_make_half4(__half x, __half y, __half z,
                                                                                 __half w) {
  bf_half4 r;
  r.x = x;
  r.y = y;
  r.z = z;
  r.w = w;
  return r;
}`;

// Warp-level tensor-core helpers (sm_80 and later; the flash-attention kernels of
// compiler/codegen/cuda_flash.ts). Fragment layouts are the PTX ISA's: for mma.m16n8k16 with f16
// operands and lane = 4·groupID + threadID_in_group, A's registers hold (row, col) = (g, 2t..2t+1),
// (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B's (k, n) = (2t..2t+1, g), (2t+8..2t+9, g); C's (g, 2t),
// (g, 2t+1), (g+8, 2t), (g+8, 2t+1). The CPU shim (tests/util/cuda_cpu.ts) defines these guards first and
// emulates the same instructions as warp collectives, so emitted kernels are checked on the host.
const PACK_HALF2 =
  `// Two floats rounded to f16 in one 32-bit register, lo in the low half (a fragment's element order).
static __device__ __forceinline__ unsigned int bf_pack_half2(float lo, float hi) {
  return static_cast<unsigned int>(__half_as_ushort(__float2half_rn(lo))) |
         (static_cast<unsigned int>(__half_as_ushort(__float2half_rn(hi))) << 16);
}`;

const MMA = `// D = A·B + C on tensor cores, one warp: A 16x16 f16 (row), B 16x8 f16 (col), C and D 16x8 f32.
static __device__ __forceinline__ void bf_mma_m16n8k16(float* c, const unsigned int* a, const unsigned int* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}`;

// Each lane passes the address of one 16-byte row in shared memory: lanes 8i..8i+7 the rows of matrix i.
// Without .trans, lane l receives row l/4, columns 2(l%4) and 2(l%4)+1 of each matrix; with .trans, rows
// 2(l%4) and 2(l%4)+1 of column l/4 (the matrix read column-major).
const BF_LDMATRIX_X4 = `// ldmatrix x4: four 8x8 b16 matrices from shared memory into fragments.
static __device__ __forceinline__ void bf_ldmatrix_x4(unsigned int* r, const __half* row) {
  const unsigned int s = static_cast<unsigned int>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}`;

const BF_LDMATRIX_X4_TRANS = `// ldmatrix x4 .trans: four 8x8 b16 matrices from shared memory into fragments.
static __device__ __forceinline__ void bf_ldmatrix_x4_trans(unsigned int* r, const __half* row) {
  const unsigned int s = static_cast<unsigned int>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}`;

const BF_LDMATRIX_X2 = `// ldmatrix x2: two 8x8 b16 matrices from shared memory into fragments.
static __device__ __forceinline__ void bf_ldmatrix_x2(unsigned int* r, const __half* row) {
  const unsigned int s = static_cast<unsigned int>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}`;

const BF_LDMATRIX_X2_TRANS = `// ldmatrix x2 .trans: two 8x8 b16 matrices from shared memory into fragments.
static __device__ __forceinline__ void bf_ldmatrix_x2_trans(unsigned int* r, const __half* row) {
  const unsigned int s = static_cast<unsigned int>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(s));
}`;

const SOURCES: Record<CudaHelper, { text: string; needs: readonly CudaHelper[] }> = {
  bf_erf: { text: ERF, needs: [] },
  bf_philox_block: { text: PHILOX_BLOCK, needs: [] },
  bf_philox: { text: PHILOX, needs: ["bf_philox_block"] },
  bf_philox4: { text: PHILOX4, needs: ["bf_philox_block"] },
  bf_half4: { text: HALF4, needs: [] },
  bf_pack_half2: { text: PACK_HALF2, needs: [] },
  bf_mma_m16n8k16: { text: MMA, needs: [] },
  bf_ldmatrix_x4: { text: BF_LDMATRIX_X4, needs: [] },
  bf_ldmatrix_x4_trans: { text: BF_LDMATRIX_X4_TRANS, needs: [] },
  bf_ldmatrix_x2: { text: BF_LDMATRIX_X2, needs: [] },
  bf_ldmatrix_x2_trans: { text: BF_LDMATRIX_X2_TRANS, needs: [] },
};

const ORDER: readonly CudaHelper[] = [
  "bf_half4",
  "bf_erf",
  "bf_philox_block",
  "bf_philox",
  "bf_philox4",
  "bf_pack_half2",
  "bf_mma_m16n8k16",
  "bf_ldmatrix_x4",
  "bf_ldmatrix_x4_trans",
  "bf_ldmatrix_x2",
  "bf_ldmatrix_x2_trans",
];

/** Names the prelude defines, which kernel identifiers must not take. */
export const CUDA_PRELUDE_NAMES: readonly string[] = [...ORDER, "bf_make_half4"];

/** C type name -> a suffix for helper names ("unsigned int" -> "u32"). */
const SUFFIX: Record<string, string> = { float: "f32", int: "i32", "unsigned int": "u32", __half: "f16" };

/** Name of the warp-level reduction of `r` over `width` lanes. */
export const warpReduceName = (r: ReduceHelper, width: number) =>
  `bf_warp_${r.op}_${SUFFIX[r.type]}_${width}`;
/** Name of the block-level fold of `warps` per-warp slots. */
export const blockReduceName = (r: ReduceHelper, warps: number) =>
  `bf_block_${r.op}_${SUFFIX[r.type]}_${warps}`;

/**
 * Butterfly over `width` lanes: after the step with offset o, lanes i and i^o hold a op b and b op a,
 * which are the same value (sum and max commute exactly), so every lane ends with the same result,
 * combined in an order that depends only on the lane numbers.
 */
function warpReduce(r: ReduceHelper, width: number): string {
  const name = warpReduceName(r, width);
  const mask = width === 32 ? "0xffffffffu" : `0x${((2 ** width) - 1).toString(16)}u`;
  return guarded(
    name,
    `static __device__ __forceinline__ ${r.type} ${name}(${r.type} a) {
#pragma unroll
  for (int o = ${width / 2}; o > 0; o >>= 1) {
    const ${r.type} b = __shfl_xor_sync(${mask}, a, o, ${width});
    a = ${r.combine};
  }
  return a;
}`,
  );
}

/** Left-to-right fold of the per-warp slots: every thread reads them all, in the same order. */
function blockReduce(r: ReduceHelper, warps: number): string {
  const name = blockReduceName(r, warps);
  return guarded(
    name,
    `static __device__ __forceinline__ ${r.type} ${name}(const ${r.type}* slots) {
  ${r.type} a = slots[0];
#pragma unroll
  for (int i = 1; i < ${warps}; ++i) {
    const ${r.type} b = slots[i];
    a = ${r.combine};
  }
  return a;
}`,
  );
}

export interface PreludeRequest {
  readonly helpers: ReadonlySet<CudaHelper>;
  /** Reductions by `${op}:${type}`, with the warp width and warp count of the kernel. */
  readonly reductions: ReadonlyMap<string, ReduceHelper>;
  readonly warpWidth: number;
  readonly warps: number;
}

/** The text of the requested helpers and their dependencies, blank-line separated ("" when none). */
export function cudaPrelude(req: PreludeRequest): string {
  const want = new Set<CudaHelper>();
  const add = (f: CudaHelper) => {
    if (want.has(f)) return;
    want.add(f);
    SOURCES[f].needs.forEach(add);
  };
  req.helpers.forEach(add);
  const parts = ORDER.filter((f) => want.has(f)).map((f) => guarded(f, SOURCES[f].text));
  for (const key of [...req.reductions.keys()].sort()) {
    const r = req.reductions.get(key)!;
    parts.push(warpReduce(r, req.warpWidth));
    if (req.warps > 1) parts.push(blockReduce(r, req.warps));
  }
  return parts.join("\n\n");
}
