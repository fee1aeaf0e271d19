import assert from "node:assert/strict";
import { fillUniform, philox4x32, uniformAt } from "../../numeric/philox.ts";

Deno.test("philox4x32-10 matches the Random123 known-answer vectors", () => {
  assert.deepEqual(philox4x32([0, 0, 0, 0], [0, 0]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
  assert.deepEqual(
    philox4x32([0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff], [0xffffffff, 0xffffffff]),
    [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
  );
  assert.deepEqual(
    philox4x32([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]),
    [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
  );
});

// Slow but obviously exact BigInt transcription of the round function, to cross-check the
// 16-bit-split multiply on many inputs beyond the three known-answer vectors.
function philoxBigInt(ctr: number[], key: number[]): number[] {
  const mask = 0xffffffffn;
  let [c0, c1, c2, c3] = ctr.map(BigInt);
  let [k0, k1] = key.map(BigInt);
  for (let r = 0; r < 10; r++) {
    const p0 = 0xd2511f53n * c0;
    const p1 = 0xcd9e8d57n * c2;
    [c0, c1, c2, c3] = [(p1 >> 32n) ^ c1 ^ k0, p1 & mask, (p0 >> 32n) ^ c3 ^ k1, p0 & mask];
    k0 = (k0 + 0x9e3779b9n) & mask;
    k1 = (k1 + 0xbb67ae85n) & mask;
  }
  return [c0, c1, c2, c3].map(Number);
}

Deno.test("philox4x32 agrees with a BigInt reference on random inputs", () => {
  let s = 0x12345678;
  const next = () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>>= 0);
  };
  for (let n = 0; n < 2000; n++) {
    const ctr: [number, number, number, number] = [next(), next(), next(), next()];
    const key: [number, number] = [next(), next()];
    assert.deepEqual(philox4x32(ctr, key), philoxBigInt(ctr, key));
  }
});

Deno.test("uniformAt follows the documented counter/key layout", () => {
  const seed = 1234, step = 56, stream = 7;
  for (const i of [0, 1, 2, 3, 4, 5, 1001, 2 ** 34 - 1]) {
    const words = philox4x32([Math.floor(i / 4), 0, step, 0], [seed, stream]);
    assert.equal(uniformAt(seed, step, stream, i), (words[i % 4] >>> 8) * 2 ** -24, `i=${i}`);
  }
});

Deno.test("uniforms lie in [0, 1) on the 2^-24 grid, exactly representable in f32", () => {
  for (let i = 0; i < 10_000; i++) {
    const u = uniformAt(99, 3, 1, i);
    assert.ok(u >= 0 && u < 1);
    assert.equal(Math.fround(u), u);
    assert.ok(Number.isInteger(u * 2 ** 24));
  }
});

Deno.test("uniform mean and variance are within 4 sigma of 1/2 and 1/12", () => {
  const n = 100_000;
  const u = new Float64Array(n);
  fillUniform(u, 42, 0, 0);
  let sum = 0;
  for (const x of u) sum += x;
  const mean = sum / n;
  let sq = 0;
  for (const x of u) sq += (x - 0.5) ** 2;
  const variance = sq / n;
  // Var(U) = 1/12; Var((U - 1/2)^2) = E[(U - 1/2)^4] - (1/12)^2 = 1/80 - 1/144 = 1/180.
  assert.ok(Math.abs(mean - 0.5) < 4 * Math.sqrt(1 / 12 / n), `mean ${mean}`);
  assert.ok(Math.abs(variance - 1 / 12) < 4 * Math.sqrt(1 / 180 / n), `variance ${variance}`);
});

Deno.test("different seeds, steps and streams give different sequences", () => {
  const seq = (seed: number, step: number, stream: number) => {
    const out = new Float64Array(64);
    fillUniform(out, seed, step, stream);
    return [...out];
  };
  const base = seq(1, 0, 0);
  assert.deepEqual(seq(1, 0, 0), base); // deterministic
  for (const other of [seq(2, 0, 0), seq(1, 1, 0), seq(1, 0, 1), seq(0, 1, 0)]) {
    assert.notDeepEqual(other, base);
    // Not merely shifted or partly shared: essentially no positions coincide.
    assert.ok(other.filter((x, i) => x === base[i]).length <= 1);
  }
});

Deno.test("fillUniform equals uniformAt elementwise, for f64 and f32 outputs of any length", () => {
  for (const n of [0, 1, 3, 4, 5, 1023]) {
    const a = new Float64Array(n);
    const b = new Float32Array(n);
    fillUniform(a, 0xdeadbeef, 0xffffffff, 3);
    fillUniform(b, 0xdeadbeef, 0xffffffff, 3);
    for (let i = 0; i < n; i++) {
      const u = uniformAt(0xdeadbeef, 0xffffffff, 3, i);
      assert.equal(a[i], u);
      assert.equal(b[i], u); // exact: the values are f32-representable
    }
  }
});

Deno.test("arguments outside u32 are rejected instead of wrapped", () => {
  assert.throws(() => philox4x32([0, 0, 0, -1], [0, 0]), RangeError);
  assert.throws(() => philox4x32([0, 0, 0, 0], [2 ** 32, 0]), RangeError);
  assert.throws(() => uniformAt(1.5, 0, 0, 0), RangeError);
  assert.throws(() => uniformAt(0, -1, 0, 0), RangeError);
  assert.throws(() => uniformAt(0, 0, 0, 2 ** 34), RangeError);
  assert.throws(() => uniformAt(0, 0, 0, 0.5), RangeError);
  assert.throws(() => fillUniform(new Float64Array(4), 0, 0, 2 ** 32), RangeError);
});
