/**
 * WGSL helper functions the emitter calls for operations WGSL lacks (erf, Philox) or spells unsafely
 * (tanh). Only the helpers a kernel uses are emitted, in a fixed order, so output stays deterministic.
 * All helpers compute in f32; the emitter upcasts f16 arguments. The `4` variants serve vectorized loop
 * kernels (compiler/lower/vectorize.ts): erf and tanh lane by lane, and Philox's four words at once.
 */

export type PreludeFn =
  | "bf_erf"
  | "bf_tanh"
  | "bf_erf4"
  | "bf_tanh4"
  | "bf_mul_wide"
  | "bf_philox"
  | "bf_philox4";

/**
 * erf with |error| <= 1e-7 in f32 (8.8e-8 simulated; the GPU's exp adds a little). Coefficients come from
 * compiler/codegen/fit_erf.ts (Chebyshev interpolation against runtime/numeric/erf.ts); tests/wgsl_emit
 * checks they still match that derivation.
 */
export const ERF_SMALL = [
  0.96546876,
  -0.1405361,
  0.019852497,
  -0.0022854195,
  0.00021751355,
  -0.000017669068,
  0.0000012306056,
] as const;
export const ERF_LARGE = [
  0.305953,
  0.14335628,
  -0.024242949,
  0.0023097787,
  0.00046050682,
  -0.00035449324,
  0.00012329499,
  -0.000019526358,
  -0.0000023214589,
] as const;

/** Horner evaluation of Σ coeffs[i]·u^i into the mutable local `acc`, one statement per line. */
function horner(coeffs: readonly number[], u: string, acc: string): string {
  const lines = [`  var ${acc} = ${coeffs[coeffs.length - 1]};`];
  for (let i = coeffs.length - 2; i >= 0; i--) {
    const c = coeffs[i];
    lines.push(`  ${acc} = ${acc} * ${u} ${c < 0 ? "-" : "+"} ${Math.abs(c)};`);
  }
  return lines.join("\n");
}

const ERF =
  `// erf(x) to ~1e-7: |x| < 1 as x * P(2x² - 1); 1 <= |x| <= 4 as 1 - exp(-x²) * Q((1/x - 0.625) / 0.375);
// beyond 4, ±1. Both branches are computed and one selected: no divergence.
fn bf_erf(x: f32) -> f32 {
  let a = min(abs(x), 4.0);
  let u_small = 2.0 * a * a - 1.0;
${horner(ERF_SMALL, "u_small", "p")}
  let u_large = (1.0 / max(a, 1.0) - 0.625) * (1.0 / 0.375);
${horner(ERF_LARGE, "u_large", "q")}
  let r = select(1.0 - exp(-a * a) * q, a * p, a < 1.0);
  return select(r, -r, x < 0.0);
}`;

// tanh(±10) is 1 to within 4e-9, below half an f32 ulp of 1, so clamping changes no result; it keeps
// drivers that compute tanh through exp(2x) from overflowing to inf/inf = NaN.
const TANH = `// tanh with its argument clamped: some drivers overflow to NaN for large |x|.
fn bf_tanh(x: f32) -> f32 {
  return tanh(clamp(x, -10.0, 10.0));
}`;

// WGSL has no mulhi; the 64-bit product is assembled from 16-bit halves (each partial product < 2^32),
// exactly as runtime/numeric/philox.ts does it.
const MUL_WIDE = `// Full 64-bit product of two u32 as (hi, lo).
fn bf_mul_wide(a: u32, b: u32) -> vec2<u32> {
  let a_hi = a >> 16u;
  let a_lo = a & 0xffffu;
  let b_hi = b >> 16u;
  let b_lo = b & 0xffffu;
  let ll = a_lo * b_lo;
  let lh = a_lo * b_hi;
  let hl = a_hi * b_lo;
  let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
  let hi = a_hi * b_hi + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
  return vec2<u32>(hi, a * b);
}`;

// The ten rounds of Philox4x32-10 on the counter (c0..c3) and key (k0, k1), shared by both helpers.
const PHILOX_ROUNDS = `  var c0 = index >> 2u;
  var c1 = 0u;
  var c2 = step;
  var c3 = 0u;
  var k0 = seed;
  var k1 = stream;
  for (var i = 0; i < 10; i++) {
    let p0 = bf_mul_wide(c0, 0xd2511f53u);
    let p1 = bf_mul_wide(c2, 0xcd9e8d57u);
    c0 = p1.x ^ c1 ^ k0;
    c1 = p1.y;
    c2 = p0.x ^ c3 ^ k1;
    c3 = p0.y;
    k0 = k0 + 0x9e3779b9u;
    k1 = k1 + 0xbb67ae85u;
  }`;

const PHILOX = `// The project's dropout uniform (runtime/numeric/philox.ts): Philox4x32-10 with counter
// (index / 4, 0, step, 0) and key (seed, stream); word index % 4; (bits >> 8) * 2^-24.
fn bf_philox(seed: u32, step: u32, stream: u32, index: u32) -> f32 {
${PHILOX_ROUNDS}
  let w = index & 3u;
  let bits = select(select(c3, c2, w == 2u), select(c1, c0, w == 0u), w < 2u);
  return f32(bits >> 8u) * (1.0 / 16777216.0);
}`;

// Elements index..index+3 (index a multiple of 4) are the four words of one block: computed once.
const PHILOX4 =
  `// bf_philox of the four elements index..index+3, index a multiple of 4: one block, all four words.
fn bf_philox4(seed: u32, step: u32, stream: u32, index: u32) -> vec4<f32> {
${PHILOX_ROUNDS}
  return vec4<f32>(vec4<u32>(c0, c1, c2, c3) >> vec4<u32>(8u)) * (1.0 / 16777216.0);
}`;

/** A lane-by-lane vec4<f32> variant of the scalar helper `fn`. */
const lanewise = (fn: string) =>
  `fn ${fn}4(x: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(${fn}(x.x), ${fn}(x.y), ${fn}(x.z), ${fn}(x.w));
}`;

const SOURCES: Record<PreludeFn, { text: string; needs: readonly PreludeFn[] }> = {
  bf_erf: { text: ERF, needs: [] },
  bf_tanh: { text: TANH, needs: [] },
  bf_erf4: { text: lanewise("bf_erf"), needs: ["bf_erf"] },
  bf_tanh4: { text: lanewise("bf_tanh"), needs: ["bf_tanh"] },
  bf_mul_wide: { text: MUL_WIDE, needs: [] },
  bf_philox: { text: PHILOX, needs: ["bf_mul_wide"] },
  bf_philox4: { text: PHILOX4, needs: ["bf_mul_wide"] },
};

/** Fixed emission order (dependencies first). */
const ORDER: readonly PreludeFn[] = [
  "bf_erf",
  "bf_tanh",
  "bf_erf4",
  "bf_tanh4",
  "bf_mul_wide",
  "bf_philox",
  "bf_philox4",
];

/** Names of all prelude functions, which kernel identifiers must not shadow. */
export const PRELUDE_NAMES: readonly string[] = ORDER;

/** The WGSL text of the used helpers and their dependencies, blank-line separated ("" when none). */
export function preludeFor(used: ReadonlySet<PreludeFn>): string {
  const want = new Set<PreludeFn>();
  const add = (f: PreludeFn) => {
    if (want.has(f)) return;
    want.add(f);
    SOURCES[f].needs.forEach(add);
  };
  used.forEach(add);
  return ORDER.filter((f) => want.has(f)).map((f) => SOURCES[f].text).join("\n\n");
}
