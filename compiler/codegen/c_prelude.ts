/**
 * The C helpers the CPU emitter (c.ts) calls: Philox (bit-identical to numeric/philox.ts), erf (the WGSL
 * prelude's polynomial, so all three targets compute the same function), bf16 <-> f32 conversion in
 * registers (f16 is GCC's `_Float16`, converted by the compiler: F16C instructions under -march=native),
 * saturating float -> integer truncation, integer min/max, and the four-lane structs of vector bindings.
 * Only what a kernel uses is emitted, each helper `static inline` inside an include guard, so the runtime
 * can paste every kernel of a plan into one translation unit (runtime/cpu/compile.ts).
 */
import { ERF_LARGE, ERF_SMALL } from "./wgsl_prelude.ts";

export type CHelper = keyof typeof SOURCES;

const guarded = (name: string, text: string) =>
  `#ifndef ${name.toUpperCase()}_DEFINED\n#define ${name.toUpperCase()}_DEFINED\n${text}\n#endif`;

/** Horner evaluation of Σ coeffs[i]·u^i, term by term as the WGSL prelude writes it. */
function horner(coeffs: readonly number[], u: string, acc: string): string {
  const lines = [`  float ${acc} = ${coeffs[coeffs.length - 1]}f;`];
  for (let i = coeffs.length - 2; i >= 0; i--) {
    const c = coeffs[i];
    lines.push(`  ${acc} = ${acc} * ${u} ${c < 0 ? "-" : "+"} ${Math.abs(c)}f;`);
  }
  return lines.join("\n");
}

const ERF = `// erf(x) to ~1e-7, the WGSL prelude's polynomial: |x| < 1 as x * P(2x^2 - 1);
// 1 <= |x| <= 4 as 1 - exp(-x^2) * Q((1/x - 0.625) / 0.375); beyond 4, +-1. Both branches are computed
// (branch-free, so a loop over threads vectorizes).
static inline float bf_erf(float x) {
  const float a = bf_minf(fabsf(x), 4.0f);
  const float u_small = 2.0f * a * a - 1.0f;
${horner(ERF_SMALL, "u_small", "p")}
  const float u_large = (1.0f / bf_maxf(a, 1.0f) - 0.625f) * (1.0f / 0.375f);
${horner(ERF_LARGE, "u_large", "q")}
  const float r = a < 1.0f ? a * p : 1.0f - expf(-a * a) * q;
  return x < 0.0f ? -r : r;
}`;

// The 64-bit product's high word is a shift of a uint64_t product; same rounds, constants and key bumps
// as numeric/philox.ts, the WGSL prelude and the CUDA prelude.
const PHILOX_BLOCK =
  `// Philox4x32-10 of counter (index / 4, 0, step, 0) and key (seed, stream): the project's dropout stream.
static inline void bf_philox_block(uint32_t seed, uint32_t step, uint32_t stream, uint32_t index,
                                   uint32_t w[4]) {
  uint32_t c0 = index >> 2, c1 = 0u, c2 = step, c3 = 0u, k0 = seed, k1 = stream;
  for (int i = 0; i < 10; ++i) {
    const uint64_t p0 = (uint64_t)c0 * 0xd2511f53u, p1 = (uint64_t)c2 * 0xcd9e8d57u;
    c0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    c1 = (uint32_t)p1;
    c2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c3 = (uint32_t)p0;
    k0 += 0x9e3779b9u;
    k1 += 0xbb67ae85u;
  }
  w[0] = c0;
  w[1] = c1;
  w[2] = c2;
  w[3] = c3;
}`;

const PHILOX =
  `// The uniform of element index: word index % 4 of its block, (bits >> 8) * 2^-24 (exact in f32). The
// word is chosen by selects, not by indexing the block's array: an array read at a varying index keeps a
// loop over elements from vectorizing (BERT-tiny's dropout column sums ran 3x slower for it).
static inline float bf_philox(uint32_t seed, uint32_t step, uint32_t stream, uint32_t index) {
  uint32_t w[4];
  bf_philox_block(seed, step, stream, index, w);
  const uint32_t i = index & 3u;
  const uint32_t x = i == 0u ? w[0] : i == 1u ? w[1] : i == 2u ? w[2] : w[3];
  return (float)(x >> 8) * (1.0f / 16777216.0f);
}`;

const PHILOX4 =
  `// The uniforms of elements index..index+3 (index a multiple of 4): the four words of one block.
static inline bf_float4 bf_philox4(uint32_t seed, uint32_t step, uint32_t stream, uint32_t index) {
  uint32_t w[4];
  bf_philox_block(seed, step, stream, index, w);
  const float s = 1.0f / 16777216.0f;
  const bf_float4 r = {(float)(w[0] >> 8) * s, (float)(w[1] >> 8) * s, (float)(w[2] >> 8) * s,
                       (float)(w[3] >> 8) * s};
  return r;
}`;

// bf16 is the high half of an f32: widening is a shift; narrowing rounds the low 16 bits to nearest even
// (a NaN stays a quiet NaN). memcpy is the defined way to reinterpret and compiles to a register move.
const BF16 = `// bf16 stored as uint16_t, computed in f32.
static inline float bf_bf16_to_f32(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t bf_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (f != f) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}`;

const F2I =
  `// Float to integer rounding toward zero like the reference's truncation: out of range saturates, NaN -> 0.
static inline int32_t bf_f2i(float x) {
  if (x != x) return 0;
  if (x >= 2147483648.0f) return INT32_MAX;
  if (x <= -2147483648.0f) return INT32_MIN;
  return (int32_t)x;
}
static inline uint32_t bf_f2u(float x) {
  if (x != x || x <= 0.0f) return 0u;
  if (x >= 4294967296.0f) return UINT32_MAX;
  return (uint32_t)x;
}`;

// fmaxf/fminf semantics (a NaN operand yields the other one) as a compare and a select: GCC calls libm's
// fmaxf out of line unless math is finite-only, which keeps a loop from vectorizing.
const MINMAX_FLOAT = `static inline float bf_maxf(float a, float b) { return a > b ? a : (b != b ? a : b); }
static inline float bf_minf(float a, float b) { return a < b ? a : (b != b ? a : b); }`;

// glibc's vector math (libmvec, linked with -lmvec): declared SIMD-callable, so a loop calling them
// vectorizes (math.h declares these only under -ffast-math). libmvec's results are within a few ulp of
// the scalar functions', like CUDA's; which one a loop uses depends on the machine, not on the run.
const SIMD_MATH = `// Vector variants of libm functions (libmvec).
float expf(float) __attribute__((simd("notinbranch")));
float logf(float) __attribute__((simd("notinbranch")));
float tanhf(float) __attribute__((simd("notinbranch")));`;

const MINMAX = `static inline int32_t bf_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }
static inline int32_t bf_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline uint32_t bf_max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }
static inline uint32_t bf_min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }`;

// may_alias: a vector binding reads a float array through this struct type.
const VECTORS = `// Four lanes, one 16-byte (f16: 8-byte) access of a vector binding.
typedef struct __attribute__((aligned(16), may_alias)) { float x, y, z, w; } bf_float4;
typedef struct __attribute__((aligned(16), may_alias)) { int32_t x, y, z, w; } bf_int4;
typedef struct __attribute__((aligned(16), may_alias)) { uint32_t x, y, z, w; } bf_uint4;
typedef struct __attribute__((aligned(8), may_alias)) { _Float16 x, y, z, w; } bf_half4;`;

// In the order they are emitted: each after what it needs.
const SOURCES = {
  bf_simd_math: { text: SIMD_MATH, needs: [] },
  bf_vectors: { text: VECTORS, needs: [] },
  bf_bf16: { text: BF16, needs: [] },
  bf_f2i: { text: F2I, needs: [] },
  bf_minmax_int: { text: MINMAX, needs: [] },
  bf_minmax_float: { text: MINMAX_FLOAT, needs: [] },
  bf_erf: { text: ERF, needs: ["bf_minmax_float"] },
  bf_philox_block: { text: PHILOX_BLOCK, needs: [] },
  bf_philox: { text: PHILOX, needs: ["bf_philox_block"] },
  bf_philox4: { text: PHILOX4, needs: ["bf_philox_block", "bf_vectors"] },
} satisfies Record<string, { text: string; needs: readonly string[] }>;

const INCLUDES = ["math.h", "stdbool.h", "stdint.h", "stdlib.h", "string.h"].map((h) => `#include <${h}>`)
  .join("\n");

/** The includes and the requested helpers with their dependencies, blank-line separated. */
export function cPrelude(helpers: ReadonlySet<CHelper>): string {
  const want = new Set<CHelper>();
  const add = (f: CHelper) => {
    if (want.has(f)) return;
    want.add(f);
    (SOURCES[f].needs as readonly CHelper[]).forEach(add);
  };
  helpers.forEach(add);
  const order = Object.keys(SOURCES) as CHelper[];
  return [INCLUDES, ...order.filter((f) => want.has(f)).map((f) => guarded(f, SOURCES[f].text))].join("\n\n");
}
