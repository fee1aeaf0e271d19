/**
 * The loader's shuffle: a pseudo-random permutation of [0, n) evaluated one index at a time, so an epoch
 * over any number of records needs no stored permutation and a position is resumable from (seed, epoch,
 * position) alone. A balanced Feistel network on the smallest even power of two >= n is a bijection on
 * that domain; "cycle walking" (applying it again while the result is >= n) restricts it to [0, n).
 * The domain is less than 4n, so on average fewer than four applications are needed.
 */
import { hashKey, mix32 } from "./pretraining/rng.ts";

const ROUNDS = 6;
const STREAM_LOADER = 3;

export class EpochPermutation {
  private readonly halfBits: number;
  private readonly mask: number;
  private readonly keys: Uint32Array;

  constructor(readonly n: number, seed: number, epoch: number) {
    if (!Number.isSafeInteger(n) || n < 0 || n > 2 ** 32) {
      throw new RangeError(`cannot shuffle ${n} records (at most 2^32)`);
    }
    let bits = 2;
    while (2 ** bits < n) bits += 2;
    this.halfBits = bits / 2;
    this.mask = 2 ** this.halfBits - 1;
    this.keys = new Uint32Array(ROUNDS);
    for (let r = 0; r < ROUNDS; r++) this.keys[r] = hashKey(seed, STREAM_LOADER, epoch, r);
  }

  /** The record at position i of this epoch. */
  at(i: number): number {
    if (i < 0 || i >= this.n) throw new RangeError(`position ${i} outside 0..${this.n}`);
    let x = i;
    do x = this.encrypt(x); while (x >= this.n);
    return x;
  }

  private encrypt(x: number): number {
    const h = this.halfBits, m = this.mask;
    // Halves as plain numbers: with 16-bit halves the full value can exceed 2^31, so no bit shifts on it.
    let left = Math.floor(x / 2 ** h), right = x % 2 ** h;
    for (let r = 0; r < ROUNDS; r++) {
      const next = (left ^ (mix32(right ^ this.keys[r]) & m)) >>> 0;
      left = right;
      right = next;
    }
    return left * 2 ** h + right;
  }
}
