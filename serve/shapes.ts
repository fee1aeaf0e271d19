/**
 * The shapes the server compiles: sequence-length buckets and batch sizes. Every batch runs at a
 * (batch size, bucket length) pair chosen from these lists, so the set of plans is fixed at start-up and
 * compiled and warmed before the first request: no request ever waits for a compile.
 *
 * A sequence runs at the smallest bucket that holds it, whatever else is in its batch, and its own
 * positions come back; padding keys are masked out. So the plan a sequence meets depends on its own
 * length and on the batch size only — and that a row's outputs do not depend on the batch size or on the
 * other rows is what tests/cpu/serve_batching.test.ts checks bit for bit.
 */

/** Powers of two from 16 up to the longest sequence, plus the longest itself. */
export function defaultBuckets(maxLen: number): number[] {
  const out: number[] = [];
  for (let b = 16; b < maxLen; b *= 2) out.push(b);
  out.push(maxLen);
  return out;
}

/** Powers of two up to the largest batch, plus the largest itself: a batch pads to the next one. */
export function batchSizes(maxBatch: number): number[] {
  const out: number[] = [];
  for (let b = 1; b < maxBatch; b *= 2) out.push(b);
  out.push(maxBatch);
  return out;
}

/** The smallest entry that is at least `n`, or undefined when `n` exceeds them all. */
export function smallestFit(n: number, sizes: readonly number[]): number | undefined {
  return sizes.find((s) => s >= n);
}
