import assert from "node:assert/strict";
import {
  bf16BitsToNumber,
  decodeBF16,
  decodeF16,
  encodeBF16,
  encodeF16,
  f16BitsToNumber,
  numberToBF16Bits,
  numberToF16Bits,
  roundBF16,
  roundBF16Exact,
  roundF16,
} from "../../numeric/half.ts";
import { seededRandom } from "../../cases/random.ts";

const rng = (seed: number) => seededRandom(seed).u32;

const isF16NaN = (b: number) => (b & 0x7c00) === 0x7c00 && (b & 0x03ff) !== 0;
const isBF16NaN = (b: number) => (b & 0x7f80) === 0x7f80 && (b & 0x007f) !== 0;

Deno.test("f16: known bit patterns", () => {
  assert.equal(numberToF16Bits(1), 0x3c00);
  assert.equal(numberToF16Bits(-2), 0xc000);
  assert.equal(numberToF16Bits(65504), 0x7bff);
  assert.equal(f16BitsToNumber(0x7bff), 65504);
  assert.equal(numberToF16Bits(Infinity), 0x7c00);
  assert.equal(numberToF16Bits(-Infinity), 0xfc00);
  assert.equal(numberToF16Bits(2 ** -24), 0x0001); // smallest subnormal
  assert.equal(f16BitsToNumber(0x0001), 2 ** -24);
  assert.equal(f16BitsToNumber(0x03ff), 1023 * 2 ** -24); // largest subnormal
  assert.equal(f16BitsToNumber(0x0400), 2 ** -14); // smallest normal
  assert.equal(numberToF16Bits(-0), 0x8000);
  assert.ok(Object.is(f16BitsToNumber(0x8000), -0));
  assert.ok(isF16NaN(numberToF16Bits(NaN)));
  assert.ok(Number.isNaN(f16BitsToNumber(0x7e00)));
  assert.ok(Number.isNaN(f16BitsToNumber(0xfc01)));
});

Deno.test("f16: overflow and ties to even", () => {
  assert.equal(roundF16(65519), 65504); // below the 65504/65536 midpoint
  assert.equal(roundF16(65520), Infinity); // the midpoint: ties to the even neighbour, which is 2^16 = Inf
  assert.equal(roundF16(-65520), -Infinity);
  assert.equal(roundF16(2 ** -25), 0); // half the smallest subnormal: tie to even zero
  assert.equal(roundF16(2 ** -25 + 2 ** -40), 2 ** -24);
  assert.equal(roundF16(3 * 2 ** -25), 2 ** -23); // tie between 1 and 2 subnormal ulps: even is 2
  assert.equal(roundF16(1 + 2 ** -11), 1); // tie, 1.0 has the even mantissa
  assert.equal(roundF16(1 + 3 * 2 ** -11), 1 + 2 ** -9); // tie, rounds up to the even mantissa
  assert.equal(roundF16(1 + 2 ** -11 + 2 ** -30), 1 + 2 ** -10); // just above a tie
});

Deno.test("bf16: known bit patterns", () => {
  assert.equal(numberToBF16Bits(1), 0x3f80);
  assert.equal(numberToBF16Bits(-2), 0xc000);
  assert.equal(bf16BitsToNumber(0x3f80), 1);
  assert.equal(bf16BitsToNumber(0x7f7f), (2 - 2 ** -7) * 2 ** 127); // largest finite
  assert.equal(bf16BitsToNumber(0x0001), 2 ** -133); // smallest subnormal
  assert.equal(numberToBF16Bits(2 ** -133), 0x0001);
  assert.equal(numberToBF16Bits(Infinity), 0x7f80);
  assert.equal(numberToBF16Bits(-Infinity), 0xff80);
  assert.equal(numberToBF16Bits(-0), 0x8000);
  assert.ok(Object.is(bf16BitsToNumber(0x8000), -0));
  assert.ok(Object.is(roundBF16(-0), -0));
  assert.ok(isBF16NaN(numberToBF16Bits(NaN)));
  assert.ok(Number.isNaN(roundBF16(NaN)));
  assert.ok(Number.isNaN(bf16BitsToNumber(0x7fc1)));
});

Deno.test("bf16: ties to even and overflow", () => {
  assert.equal(roundBF16(1 + 2 ** -8), 1); // tie, 1.0 has the even mantissa
  assert.equal(roundBF16(1 + 3 * 2 ** -8), 1 + 2 ** -6); // tie between 1+2^-7 (odd) and 1+2^-6 (even)
  assert.equal(roundBF16(1 + 2 ** -8 + 2 ** -20), 1 + 2 ** -7); // just above a tie
  assert.equal(roundBF16(1 + 2 ** -8 - 2 ** -20), 1); // just below a tie
  assert.equal(roundBF16(-(1 + 3 * 2 ** -8)), -(1 + 2 ** -6));
  const max = (2 - 2 ** -7) * 2 ** 127;
  const mid = (2 - 2 ** -8) * 2 ** 127; // midpoint between max and 2^128
  assert.equal(roundBF16(mid - 2 ** 104), max);
  assert.equal(roundBF16(mid), Infinity); // tie; max's mantissa is odd, so it rounds up and overflows
  assert.equal(roundBF16(3.4028234663852886e38), Infinity); // f32 max
  assert.equal(roundBF16(-3.4028234663852886e38), -Infinity);
  assert.equal(roundBF16(1e300), Infinity); // beyond f32 range
  assert.equal(roundBF16(2 ** -134), 0); // tie with the smallest subnormal: even is 0
  assert.equal(roundBF16(3 * 2 ** -134), 2 ** -132);
});

Deno.test("bf16: roundBF16 double-rounds via f32, roundBF16Exact does not", () => {
  const x = 1 + 2 ** -8 + 2 ** -30; // f32 rounding lands exactly on a bf16 tie
  assert.equal(Math.fround(x), 1 + 2 ** -8);
  assert.equal(roundBF16(x), 1);
  assert.equal(roundBF16Exact(x), 1 + 2 ** -7);
  assert.equal(roundBF16Exact(-x), -(1 + 2 ** -7));
});

Deno.test("bf16: roundBF16Exact special values and overflow", () => {
  assert.ok(Object.is(roundBF16Exact(-0), -0));
  assert.ok(Number.isNaN(roundBF16Exact(NaN)));
  assert.equal(roundBF16Exact(Infinity), Infinity);
  const max = (2 - 2 ** -7) * 2 ** 127;
  assert.equal(roundBF16Exact((2 - 2 ** -8) * 2 ** 127), Infinity);
  assert.equal(roundBF16Exact((2 - 2 ** -8) * 2 ** 127 - 2 ** 80), max);
  assert.equal(roundBF16Exact(-1e300), -Infinity);
  assert.equal(roundBF16Exact(2 ** -134), 0);
  assert.equal(roundBF16Exact(2 ** -134 + 2 ** -170), 2 ** -133);
  assert.equal(roundBF16Exact(5e-324), 0); // subnormal double
  assert.equal(roundBF16Exact(2 ** -126 + 2 ** -134), 2 ** -126); // smallest normal, tie, even
});

Deno.test("bf16: roundBF16Exact agrees with roundBF16 on f32 inputs", () => {
  const next = rng(7);
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  for (let n = 0; n < 200_000; n++) {
    u32[0] = next();
    const x = f32[0];
    if (Number.isNaN(x)) continue;
    assert.ok(Object.is(roundBF16Exact(x), roundBF16(x)), `x=${x}`);
  }
});

Deno.test("bf16: roundBF16Exact near ties of random values", () => {
  const next = rng(11);
  for (let n = 0; n < 50_000; n++) {
    // Positive normal bf16 below the largest finite value, so bits + 1 is its finite successor.
    const bits = 0x0080 + (next() % (0x7f7f - 0x0080));
    const lo = bf16BitsToNumber(bits);
    const hi = bf16BitsToNumber(bits + 1);
    const half = (hi - lo) / 2;
    const tiny = half * 2 ** -(20 + (next() % 25));
    const even = bits % 2 === 0 ? lo : hi;
    assert.equal(roundBF16Exact(lo + half), even);
    assert.equal(roundBF16Exact(lo + half - tiny), lo);
    assert.equal(roundBF16Exact(lo + half + tiny), hi);
    assert.equal(roundBF16Exact(-(lo + half + tiny)), -hi);
  }
});

Deno.test("f16/bf16: every bit pattern round-trips", () => {
  for (let b = 0; b <= 0xffff; b++) {
    const h = f16BitsToNumber(b);
    if (isF16NaN(b)) assert.ok(Number.isNaN(h) && isF16NaN(numberToF16Bits(h)));
    else assert.equal(numberToF16Bits(h), b);
    const g = bf16BitsToNumber(b);
    if (isBF16NaN(b)) assert.ok(Number.isNaN(g) && isBF16NaN(numberToBF16Bits(g)));
    else assert.equal(numberToBF16Bits(g), b);
  }
});

Deno.test("f16/bf16: random values round to a nearest neighbour and are idempotent", () => {
  const next = rng(3);
  for (let n = 0; n < 20_000; n++) {
    const x = (next() / 2 ** 32 - 0.5) * 2 ** ((next() % 40) - 20);
    const h = roundF16(x);
    assert.equal(roundF16(h), h);
    assert.equal(f16BitsToNumber(numberToF16Bits(x)), h);
    // Within half an ulp: the f16 spacing at |h| is at least 2^-24 and at most |h| * 2^-10.
    assert.ok(Math.abs(x - h) <= Math.max(2 ** -25, Math.abs(h) * 2 ** -11), `f16 x=${x}`);
    const g = roundBF16(x);
    assert.equal(roundBF16(g), g);
    assert.equal(bf16BitsToNumber(numberToBF16Bits(x)), g);
    assert.ok(Math.abs(x - g) <= Math.abs(g) * 2 ** -8 + 2 ** -134, `bf16 x=${x}`);
  }
});

Deno.test("bulk converters match the scalar ones", () => {
  const next = rng(5);
  const src: number[] = [0, -0, 1, -1, 65504, 65520, 2 ** -24, 2 ** -25, 1 + 2 ** -8, 1e30, -Infinity, NaN];
  for (let n = 0; n < 1000; n++) src.push((next() / 2 ** 32 - 0.5) * 2 ** ((next() % 60) - 30));
  const f16 = encodeF16(src);
  const bf16 = encodeBF16(src);
  const bf16FromF32 = encodeBF16(new Float32Array(src));
  const f16Back = decodeF16(f16);
  const bf16Back = decodeBF16(bf16, new Float32Array(src.length));
  assert.ok(f16Back instanceof Float64Array);
  assert.ok(bf16Back instanceof Float32Array);
  for (let i = 0; i < src.length; i++) {
    assert.equal(f16[i], numberToF16Bits(src[i]));
    assert.equal(bf16[i], numberToBF16Bits(src[i]));
    assert.equal(bf16FromF32[i], bf16[i]);
    assert.ok(Object.is(f16Back[i], roundF16(src[i])), `f16 ${src[i]}`);
    assert.ok(Object.is(bf16Back[i], roundBF16(src[i])), `bf16 ${src[i]}`);
  }
});

Deno.test("bulk decoders honour subarray views and reject short outputs", () => {
  const bits = new Uint16Array([0x0000, 0x3c00, 0xc000, 0x3f80]);
  assert.deepEqual([...decodeF16(bits.subarray(1, 3))], [1, -2]);
  assert.deepEqual([...decodeBF16(bits.subarray(3))], [1]);
  assert.throws(() => decodeF16(bits, new Float64Array(2)), RangeError);
  assert.throws(() => decodeBF16(bits, new Float32Array(3)), RangeError);
  assert.throws(() => f16BitsToNumber(0x10000), RangeError);
  assert.throws(() => bf16BitsToNumber(-1), RangeError);
});
