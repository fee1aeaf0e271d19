/**
 * 16-bit float helpers: IEEE 754 binary16 ("f16") and bfloat16 ("bf16"), all round-to-nearest, ties-to-even.
 * f16 rounds the double directly (`Math.f16round`); bf16 rounds the double to f32 and then to bf16, as GPUs
 * convert kernel outputs, which can differ from one correct rounding (`roundBF16Exact` gives that). bf16
 * overflows to ±Infinity as a real conversion does; NaN stays NaN. Examples and details: DESIGN.md, notes:
 * numeric/half.ts.
 */

// Shared scratch words: one 4-byte buffer viewed four ways keeps the per-value converters free of
// allocation. Views of the same buffer with the same element size need no endianness care.
const scratch = new ArrayBuffer(4);
const scratchF16 = new Float16Array(scratch, 0, 1);
const scratchU16 = new Uint16Array(scratch, 0, 1);
const scratchF32 = new Float32Array(scratch);
const scratchU32 = new Uint32Array(scratch);
// DataView so that reading the double's exponent does not depend on host byte order.
const scratchF64 = new DataView(new ArrayBuffer(8));

function checkU16(bits: number): void {
  if (!Number.isInteger(bits) || bits < 0 || bits > 0xffff) {
    throw new RangeError(`16-bit pattern expected, got ${bits}`);
  }
}

/** Rounds a number to the nearest IEEE binary16 value (ties to even), returned as a number. */
export function roundF16(x: number): number {
  return Math.f16round(x);
}

/** Decodes a binary16 bit pattern (0..0xffff) to its value. */
export function f16BitsToNumber(bits: number): number {
  checkU16(bits);
  scratchU16[0] = bits;
  return scratchF16[0];
}

/** Rounds x to binary16 (ties to even) and returns its bit pattern. NaN gives a quiet NaN pattern. */
export function numberToF16Bits(x: number): number {
  scratchF16[0] = x;
  return scratchU16[0];
}

/**
 * f32 bit pattern -> bf16 bit pattern, round to nearest even. Adding 0x7fff plus the lowest kept bit
 * and truncating is the standard bias trick; a carry out of the mantissa correctly bumps the exponent,
 * which is also how overflow to Infinity happens. The sum stays below 2^32 for every non-NaN input.
 */
function f32BitsToBF16Bits(u: number): number {
  if ((u & 0x7fffffff) > 0x7f800000) {
    // NaN: keep sign and top payload bits, force the quiet bit so truncation cannot yield Inf.
    return (u >>> 16) | 0x0040;
  }
  return (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
}

/** Rounds x to bf16 via f32 (see header for the double-rounding note) and returns the bit pattern. */
export function numberToBF16Bits(x: number): number {
  scratchF32[0] = x;
  return f32BitsToBF16Bits(scratchU32[0]);
}

/** Decodes a bf16 bit pattern (0..0xffff) to its value. */
export function bf16BitsToNumber(bits: number): number {
  checkU16(bits);
  scratchU32[0] = bits << 16;
  return scratchF32[0];
}

/** Rounds x to bf16 the way hardware does: double -> f32 -> bf16, each step ties-to-even. */
export function roundBF16(x: number): number {
  scratchF32[0] = x;
  scratchU32[0] = f32BitsToBF16Bits(scratchU32[0]) << 16;
  return scratchF32[0];
}

const TWO_POW_52 = 2 ** 52;
// Largest finite bf16 is (2 - 2^-7) * 2^127; anything that rounds to 2^128 has overflowed.
const BF16_OVERFLOW = 2 ** 128;

/**
 * Rounds x (a double) to the nearest bf16 value in a single step, ties to even.
 *
 * bf16 has 8 significant bits and the f32 exponent range, so the spacing near |x| in [2^e, 2^(e+1))
 * is q = 2^(e-7), with e clamped at -126 to cover the subnormal range (spacing 2^-133). Dividing by q
 * is exact (power of two), leaving a value below 2^8 whose ties-to-even integer rounding is obtained
 * exactly by the classic (y + 2^52) - 2^52 trick, since doubles in [2^52, 2^53) are spaced by 1.
 */
export function roundBF16Exact(x: number): number {
  if (x === 0 || !Number.isFinite(x)) return x;
  const a = Math.abs(x);
  scratchF64.setFloat64(0, a);
  const biasedExp = (scratchF64.getUint32(0) >>> 20) & 0x7ff;
  const e = Math.max(biasedExp - 1023, -126);
  const q = 2 ** (e - 7);
  const r = ((a / q + TWO_POW_52) - TWO_POW_52) * q;
  const mag = r >= BF16_OVERFLOW ? Infinity : r;
  return x < 0 ? -mag : mag;
}

/** Rounds every value to binary16 (ties to even) and returns the bit patterns. */
export function encodeF16(src: ArrayLike<number>): Uint16Array<ArrayBuffer> {
  const f16 = new Float16Array(src);
  return new Uint16Array(f16.buffer, 0, f16.length);
}

function checkOut(n: number, out: Float32Array | Float64Array): void {
  if (out.length < n) throw new RangeError(`output holds ${out.length} values, need ${n}`);
}

/** Decodes binary16 bit patterns into `out` (default: a new Float64Array) and returns it. */
export function decodeF16(bits: Uint16Array): Float64Array<ArrayBuffer>;
export function decodeF16<T extends Float32Array | Float64Array>(bits: Uint16Array, out: T): T;
export function decodeF16(bits: Uint16Array, out?: Float32Array | Float64Array): Float32Array | Float64Array {
  const dst = out ?? new Float64Array(bits.length);
  checkOut(bits.length, dst);
  // A Uint16Array view is always 2-byte aligned, so the same bytes can be reinterpreted without a copy.
  dst.set(new Float16Array(bits.buffer, bits.byteOffset, bits.length));
  return dst;
}

/** Rounds every value to bf16 via f32 (hardware convention) and returns the bit patterns. */
export function encodeBF16(src: ArrayLike<number>): Uint16Array<ArrayBuffer> {
  // Reuse an f32 source's storage directly; otherwise the Float32Array copy performs the f32 rounding.
  const f32 = src instanceof Float32Array ? src : new Float32Array(src);
  const u32 = new Uint32Array(f32.buffer, f32.byteOffset, f32.length);
  const out = new Uint16Array(u32.length);
  for (let i = 0; i < u32.length; i++) out[i] = f32BitsToBF16Bits(u32[i]);
  return out;
}

/** Decodes bf16 bit patterns into `out` (default: a new Float64Array) and returns it. */
export function decodeBF16(bits: Uint16Array): Float64Array<ArrayBuffer>;
export function decodeBF16<T extends Float32Array | Float64Array>(bits: Uint16Array, out: T): T;
export function decodeBF16(
  bits: Uint16Array,
  out?: Float32Array | Float64Array,
): Float32Array | Float64Array {
  const dst = out ?? new Float64Array(bits.length);
  checkOut(bits.length, dst);
  // A bf16 value is the top half of an f32: widen into f32 words, then let set() convert.
  const u32 = new Uint32Array(bits.length);
  for (let i = 0; i < bits.length; i++) u32[i] = bits[i] << 16;
  dst.set(new Float32Array(u32.buffer));
  return dst;
}
