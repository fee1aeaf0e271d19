/**
 * Philox4x32-10 counter-based generator (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11) and the project's dropout random-number convention, which every backend must
 * reproduce bit for bit: for a site (seed, step, stream), element i's uniform is u = (bits >>> 8) * 2^-24
 * with bits = philox4x32([floor(i / 4), 0, step, 0], [seed, stream])[i % 4], exact in f32. The round
 * function and details: DESIGN.md, notes: numeric/philox.ts.
 */

const M0 = 0xd2511f53;
const M1 = 0xcd9e8d57;
const W0 = 0x9e3779b9;
const W1 = 0xbb67ae85;

// The 64-bit products are built from 16-bit halves of both factors: each partial product is below
// 2^32, so it is exact and the shifts/masks below see exact integers. BigInt would be far too slow, and
// Math.imul alone yields only the low word.
const M0_HI = M0 >>> 16;
const M0_LO = M0 & 0xffff;
const M1_HI = M1 >>> 16;
const M1_LO = M1 & 0xffff;

/**
 * Runs the 10 rounds on a counter/key held in plain numbers and writes the four output words to `out`.
 * Kept allocation-free so that fillUniform can call it in a tight loop.
 */
function philoxInto(
  c0: number,
  c1: number,
  c2: number,
  c3: number,
  k0: number,
  k1: number,
  out: Uint32Array,
  at = 0,
): void {
  for (let round = 0; round < 10; round++) {
    // c * M = hh * 2^32 + (lh + hl) * 2^16 + ll. `mid` gathers everything landing in bits 16..31 plus
    // the carry from ll; its bits above 16 carry into the high word.
    const a0 = c0 >>> 16;
    const b0 = c0 & 0xffff;
    const ll0 = b0 * M0_LO;
    const lh0 = b0 * M0_HI;
    const hl0 = a0 * M0_LO;
    const mid0 = (ll0 >>> 16) + (lh0 & 0xffff) + (hl0 & 0xffff);
    const hi0 = (a0 * M0_HI + (lh0 >>> 16) + (hl0 >>> 16) + (mid0 >>> 16)) >>> 0;
    const lo0 = ((mid0 << 16) | (ll0 & 0xffff)) >>> 0;

    const a2 = c2 >>> 16;
    const b2 = c2 & 0xffff;
    const ll2 = b2 * M1_LO;
    const lh2 = b2 * M1_HI;
    const hl2 = a2 * M1_LO;
    const mid2 = (ll2 >>> 16) + (lh2 & 0xffff) + (hl2 & 0xffff);
    const hi1 = (a2 * M1_HI + (lh2 >>> 16) + (hl2 >>> 16) + (mid2 >>> 16)) >>> 0;
    const lo1 = ((mid2 << 16) | (ll2 & 0xffff)) >>> 0;

    c0 = (hi1 ^ c1 ^ k0) >>> 0;
    c1 = lo1;
    c2 = (hi0 ^ c3 ^ k1) >>> 0;
    c3 = lo0;
    k0 = (k0 + W0) >>> 0;
    k1 = (k1 + W1) >>> 0;
  }
  out[at] = c0;
  out[at + 1] = c1;
  out[at + 2] = c2;
  out[at + 3] = c3;
}

function checkU32(name: string, v: number): void {
  if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) {
    throw new RangeError(`${name} must be a u32, got ${v}`);
  }
}

const words = new Uint32Array(4);

/** Philox4x32-10 of a 128-bit counter under a 64-bit key; all words are u32. */
export function philox4x32(
  counter: readonly [number, number, number, number],
  key: readonly [number, number],
): [number, number, number, number] {
  for (let j = 0; j < 4; j++) checkU32(`counter[${j}]`, counter[j]);
  checkU32("key[0]", key[0]);
  checkU32("key[1]", key[1]);
  philoxInto(counter[0], counter[1], counter[2], counter[3], key[0], key[1], words);
  return [words[0], words[1], words[2], words[3]];
}

const TWO_NEG_24 = 2 ** -24;
const MAX_INDEX = 2 ** 34 - 1;

function checkSite(seed: number, step: number, stream: number): void {
  checkU32("seed", seed);
  checkU32("step", step);
  checkU32("stream", stream);
}

/** The dropout uniform in [0, 1) for element `i` of site (seed, step, stream); see the file header. */
export function uniformAt(seed: number, step: number, stream: number, i: number): number {
  checkSite(seed, step, stream);
  if (!Number.isInteger(i) || i < 0 || i > MAX_INDEX) {
    throw new RangeError(`index must be in [0, 2^34), got ${i}`);
  }
  philoxInto(Math.floor(i / 4), 0, step, 0, seed, stream, words);
  return (words[i % 4] >>> 8) * TWO_NEG_24;
}

/**
 * Writes philox4x32([first + j, 0, 0, 0], [k0, k1]) to out[4j .. 4j+3] for every j < out.length / 4:
 * the words of consecutive counters with no allocation per call (parameter init draws 336 M values).
 */
export function fillPhiloxWords(out: Uint32Array, first: number, k0: number, k1: number): void {
  checkU32("key[0]", k0);
  checkU32("key[1]", k1);
  checkU32("counter", first + out.length / 4 - 1);
  for (let j = 0; 4 * j < out.length; j++) philoxInto(first + j, 0, 0, 0, k0, k1, out, 4 * j);
}

/** Fills out[i] = uniformAt(seed, step, stream, i) for every i, one Philox call per four elements. */
export function fillUniform(
  out: Float64Array | Float32Array,
  seed: number,
  step: number,
  stream: number,
): void {
  checkSite(seed, step, stream);
  const n = out.length;
  if (n > MAX_INDEX + 1) throw new RangeError(`at most 2^34 elements per site, got ${n}`);
  const block = new Uint32Array(4);
  for (let base = 0; base < n; base += 4) {
    philoxInto(base / 4, 0, step, 0, seed, stream, block);
    const m = Math.min(4, n - base);
    for (let j = 0; j < m; j++) out[base + j] = (block[j] >>> 8) * TWO_NEG_24;
  }
}
