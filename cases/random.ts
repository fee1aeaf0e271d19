/** Seeded xorshift32 for test data, so a failing test reproduces; statistical quality is irrelevant. */
export function seededRandom(seed: number) {
  let s = seed >>> 0 || 0x6a09e667;
  const u32 = () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s;
  };
  /** A double in (0, 1). */
  const uniform = () => (u32() + 0.5) / 2 ** 32;
  return {
    u32,
    uniform,
    range: (lo: number, hi: number) => lo + (hi - lo) * uniform(),
    normal: () => Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform()),
    /** An integer in [lo, hi). */
    int: (lo: number, hi: number) => lo + Math.floor(uniform() * (hi - lo)),
  };
}

export type Rng = ReturnType<typeof seededRandom>;

/** n standard normal samples. */
export const randn = (r: Rng, n: number) => Float64Array.from({ length: n }, () => r.normal());
