/**
 * The error function in double precision (JavaScript's Math has none), to ~1e-16 relative accuracy
 * (tests/cpu/interpreter.test.ts), by two expansions, each where it converges fast without cancellation:
 *  - |x| < 2.5: erf(x) = 2/sqrt(pi) * e^(-x^2) * sum_n 2^n x^(2n+1) / (1*3*...*(2n+1)); every term is
 *    positive, so there is no cancellation (unlike the alternating Taylor series).
 *  - |x| >= 2.5: erfc(x) = e^(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...))))), the
 *    Laplace continued fraction, evaluated bottom-up; then erf = 1 - erfc.
 */
const TWO_OVER_SQRT_PI = 2 / Math.sqrt(Math.PI);
const ONE_OVER_SQRT_PI = 1 / Math.sqrt(Math.PI);

function erfSeries(x: number): number {
  const x2 = x * x;
  let term = x, sum = x;
  for (let n = 1; n < 200; n++) {
    term *= (2 * x2) / (2 * n + 1);
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return TWO_OVER_SQRT_PI * Math.exp(-x2) * sum;
}

function erfcContinuedFraction(x: number): number {
  // Terms k/2 for k = 1..K; 60 levels are ample for x >= 2.5.
  let f = x;
  for (let k = 60; k >= 1; k--) f = x + (k / 2) / f;
  return (ONE_OVER_SQRT_PI * Math.exp(-x * x)) / f;
}

export function erf(x: number): number {
  if (Number.isNaN(x) || x === 0) return x; // keeps the sign of -0, as C's erf does
  const a = Math.abs(x);
  if (a < 2.5) return x < 0 ? -erfSeries(a) : erfSeries(a);
  if (a > 6) return x < 0 ? -1 : 1;
  const r = 1 - erfcContinuedFraction(a);
  return x < 0 ? -r : r;
}
