/**
 * The seeded generator of the data pipeline: xoshiro128** (Blackman and Vigna), 32-bit state words so
 * it runs on plain JS integers. A generator is keyed by a seed and a list of stream numbers (for
 * example a shard index), so every shard draws from its own sequence and the output of prepare-data
 * does not depend on which worker made which shard.
 */

/** splitmix32-style finalizer: a bijective u32 -> u32 mix with full avalanche. */
export function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x7feb352d);
  x = Math.imul(x ^ (x >>> 15), 0x846ca68b);
  return (x ^ (x >>> 16)) >>> 0;
}

/** Folds a seed and stream numbers into one u32 (order matters). */
export function hashKey(seed: number, ...streams: number[]): number {
  let h = mix32((seed >>> 0) ^ 0x9e3779b9);
  // Seeds above 2^32 (up to 2^53) keep their high bits instead of silently aliasing.
  h = mix32(h ^ Math.floor(seed / 2 ** 32));
  for (const s of streams) h = mix32((h + 0x632be5ab) ^ mix32((s >>> 0) + 0x85ebca6b));
  return h;
}

export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number, ...streams: number[]) {
    let h = hashKey(seed, ...streams);
    const next = () => (h = mix32(h + 0x9e3779b9));
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next() | 1; // never the all-zero state, from which xoshiro cannot leave
  }

  /** A uniform u32. */
  u32(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9) >>> 0;
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return result;
  }

  /** A double in [0, 1) with 32 random bits (ample for probabilities and index draws). */
  random(): number {
    return this.u32() / 4294967296;
  }

  /** An integer in [0, n), n <= 2^32. Bias is below n / 2^32, negligible for the sizes used here. */
  below(n: number): number {
    return Math.floor((this.u32() * n) / 4294967296);
  }

  /** An integer in [lo, hi], both inclusive (Python's random.randint). */
  randint(lo: number, hi: number): number {
    return lo + this.below(hi - lo + 1);
  }

  /** Fisher-Yates in place over the first `n` entries (Python's random.shuffle order: from the end). */
  shuffle<T extends { [i: number]: number } | unknown[]>(arr: T, n = (arr as ArrayLike<unknown>).length): T {
    const a = arr as unknown as unknown[];
    for (let i = n - 1; i > 0; i--) {
      const j = this.below(i + 1);
      const t = a[i];
      a[i] = a[j];
      a[j] = t;
    }
    return arr;
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}
