/**
 * Derives the coefficients of the WGSL prelude's `bf_erf` (compiler/codegen/wgsl_prelude.ts) and reports
 * its worst absolute error when evaluated in f32. A development tool, not part of the compiler:
 *
 *   deno run tools/fit_erf.ts
 *
 * Method: Chebyshev interpolation (near-minimax for smooth functions) against the double-precision
 * reference erf of numeric/erf.ts, converted to monomials in the mapped variable u in [-1, 1] so
 * the shader evaluates a plain Horner chain.
 *  - |x| < 1:      erf(x) = x * P(u),  u = 2x² - 1            (erf(x)/x is even and smooth in x²)
 *  - 1 <= |x| <= 4: erf(x) = 1 - exp(-x²) * Q(u), u = (1/x - 0.625) / 0.375
 *    (erfc(x)·e^{x²} behaves like 1/(x√π), so it is nearly linear in 1/x and needs few terms)
 *  - |x| > 4:      erf(x) = ±1 (erfc(4) = 1.5e-8 is below half an f32 ulp of 1)
 */
import { erf } from "../numeric/erf.ts";

export const ERF_DEGREE_SMALL = 6;
export const ERF_DEGREE_LARGE = 8;

/** Chebyshev coefficients of f on [-1, 1] from interpolation at the n+1 Chebyshev nodes. */
function chebyshev(f: (u: number) => number, degree: number): number[] {
  const n = degree + 1;
  const c = new Array<number>(n).fill(0);
  for (let k = 0; k < n; k++) {
    const theta = (Math.PI * (k + 0.5)) / n;
    const fx = f(Math.cos(theta));
    for (let j = 0; j < n; j++) c[j] += (2 / n) * fx * Math.cos(j * theta);
  }
  c[0] /= 2;
  return c;
}

/** Σ c_j T_j(u) as monomial coefficients (index = power), via T_{j+1} = 2u T_j - T_{j-1}. */
function monomials(c: readonly number[]): number[] {
  const out = new Array<number>(c.length).fill(0);
  let prev = [1];
  let cur = [0, 1];
  const addScaled = (p: readonly number[], s: number) => p.forEach((v, i) => (out[i] += s * v));
  addScaled(prev, c[0]);
  if (c.length > 1) addScaled(cur, c[1]);
  for (let j = 2; j < c.length; j++) {
    const next = new Array<number>(j + 1).fill(0);
    cur.forEach((v, i) => (next[i + 1] += 2 * v));
    prev.forEach((v, i) => (next[i] -= v));
    addScaled(next, c[j]);
    prev = cur;
    cur = next;
  }
  return out;
}

export function fitErf(): { small: number[]; large: number[] } {
  const small = monomials(chebyshev((u) => {
    const x = Math.sqrt((u + 1) / 2);
    return x === 0 ? 2 / Math.sqrt(Math.PI) : erf(x) / x;
  }, ERF_DEGREE_SMALL));
  const large = monomials(chebyshev((u) => {
    const x = 1 / (0.625 + 0.375 * u);
    return (1 - erf(x)) * Math.exp(x * x);
  }, ERF_DEGREE_LARGE));
  return { small: small.map(Math.fround), large: large.map(Math.fround) };
}

/** The prelude's algorithm with every operation rounded to f32, as a GPU computes it. */
export function erfF32(x: number, c: { small: readonly number[]; large: readonly number[] }): number {
  const fr = Math.fround;
  const horner = (p: readonly number[], u: number) => {
    let r = p[p.length - 1];
    for (let i = p.length - 2; i >= 0; i--) r = fr(fr(r * u) + p[i]);
    return r;
  };
  const a = fr(Math.min(Math.abs(x), 4));
  let r: number;
  if (a < 1) {
    r = fr(a * horner(c.small, fr(fr(2 * fr(a * a)) - 1)));
  } else {
    const u = fr(fr(fr(1 / a) - 0.625) * fr(1 / 0.375));
    r = fr(1 - fr(fr(Math.exp(-fr(a * a))) * horner(c.large, u)));
  }
  return x < 0 ? -r : r;
}

if (import.meta.main) {
  const c = fitErf();
  const show = (p: number[]) => p.map((v) => String(v)).join(", ");
  console.log(`small (u = 2x²-1, |x| < 1): ${show(c.small)}`);
  console.log(`large (u = (1/x - 0.625)/0.375): ${show(c.large)}`);
  let worst = 0, at = 0;
  for (let i = 0; i <= 400_000; i++) {
    const x = Math.fround(-5 + i / 40_000);
    const e = Math.abs(erfF32(x, c) - erf(x));
    if (e > worst) [worst, at] = [e, x];
  }
  console.log(`worst absolute error in f32 on [-5, 5]: ${worst.toExponential(2)} at x = ${at}`);
}
