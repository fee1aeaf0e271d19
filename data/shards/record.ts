/**
 * Reading and writing single records of the v1 layout (see format.ts) through typed-array views of a
 * byte buffer. Views index by element, so a record base must be a multiple of 4 (records are).
 */
import type { RecordLayout } from "./format.ts";

if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  // Typed-array views use the host's byte order; the format is little-endian.
  throw new Error("bertfuse shards need a little-endian host");
}

/** Element views of one byte buffer. */
export interface Views {
  u8: Uint8Array;
  u16: Uint16Array;
  i32: Int32Array;
}

export function viewsOf(bytes: Uint8Array): Views {
  const len = bytes.byteLength;
  return {
    u8: bytes,
    u16: new Uint16Array(bytes.buffer, bytes.byteOffset, len >>> 1),
    i32: new Int32Array(bytes.buffer, bytes.byteOffset, len >>> 2),
  };
}

/** One instance as plain arrays, unpadded (what data-dump prints and tests compare). */
export interface Instance {
  inputIds: number[];
  segmentBStart: number;
  maskedLmPositions: number[];
  maskedLmIds: number[];
  nextSentenceLabel: number;
}

/** Reads element k of an id field (u16 or i32) starting at byte `at`. */
export function idAt(v: Views, layout: RecordLayout, at: number, k: number): number {
  return layout.idDtype === "u16" ? v.u16[(at >>> 1) + k] : v.i32[(at >>> 2) + k];
}

/** The fields of one record (encodeRecord, RecordBuffer.append). */
export type RecordFields = [
  tokens: ArrayLike<number>,
  n: number,
  segmentBStart: number,
  positions: ArrayLike<number>,
  labels: ArrayLike<number>,
  numMasked: number,
  nextSentenceLabel: number,
];

/**
 * Writes one record at byte `base`. `tokens[0..n)` are the (masked) input ids; the rest of input_ids is
 * filled with `pad` and unused prediction slots with 0, so equal instances give equal bytes.
 */
export function encodeRecord(v: Views, layout: RecordLayout, base: number, pad: number, ...f: RecordFields) {
  const [tokens, n, segmentBStart, positions, labels, numMasked, nextSentenceLabel] = f;
  const S = layout.seqLength, P = layout.maxPredictions;
  if (layout.idDtype === "u16") {
    const ids = (base + layout.inputIds) >>> 1, lm = (base + layout.maskedLmIds) >>> 1;
    for (let i = 0; i < n; i++) v.u16[ids + i] = tokens[i];
    v.u16.fill(pad, ids + n, ids + S);
    for (let k = 0; k < numMasked; k++) v.u16[lm + k] = labels[k];
    v.u16.fill(0, lm + numMasked, lm + P);
  } else {
    const ids = (base + layout.inputIds) >>> 2, lm = (base + layout.maskedLmIds) >>> 2;
    for (let i = 0; i < n; i++) v.i32[ids + i] = tokens[i];
    v.i32.fill(pad, ids + n, ids + S);
    for (let k = 0; k < numMasked; k++) v.i32[lm + k] = labels[k];
    v.i32.fill(0, lm + numMasked, lm + P);
  }
  const pos = (base + layout.maskedLmPositions) >>> 1;
  for (let k = 0; k < numMasked; k++) v.u16[pos + k] = positions[k];
  v.u16.fill(0, pos + numMasked, pos + P);
  v.u16[(base + layout.numTokens) >>> 1] = n;
  v.u16[(base + layout.segmentBStart) >>> 1] = segmentBStart;
  v.u16[(base + layout.numMasked) >>> 1] = numMasked;
  v.u8[base + layout.nextSentenceLabel] = nextSentenceLabel;
}

/**
 * Why the record at `base` cannot be an instance, or null when it is well-formed: lengths in range,
 * ids inside the vocabulary, masked positions ascending inside the sequence. Cheap enough to run on every
 * record read, so a corrupt shard fails at the record instead of feeding the model garbage.
 */
export function recordProblem(
  v: Views,
  layout: RecordLayout,
  base: number,
  vocabSize: number,
): string | null {
  const S = layout.seqLength;
  const n = v.u16[(base + layout.numTokens) >>> 1];
  const sb = v.u16[(base + layout.segmentBStart) >>> 1];
  const m = v.u16[(base + layout.numMasked) >>> 1];
  const label = v.u8[base + layout.nextSentenceLabel];
  if (n < 5 || n > S) return `num_tokens ${n} is outside 5..${S}`;
  if (sb < 3 || sb > n - 2) return `segment_b_start ${sb} is outside 3..${n - 2}`;
  if (m > layout.maxPredictions) {
    return `num_masked ${m} exceeds max_predictions_per_seq ${layout.maxPredictions}`;
  }
  if (label > 1) return `next_sentence_label ${label} is not 0 or 1`;
  for (let i = 0; i < n; i++) {
    const id = idAt(v, layout, base + layout.inputIds, i);
    if (id < 0 || id >= vocabSize) return `input_ids[${i}] = ${id} is outside the vocabulary (${vocabSize})`;
  }
  const pos = (base + layout.maskedLmPositions) >>> 1;
  let prev = 0;
  for (let k = 0; k < m; k++) {
    const p = v.u16[pos + k];
    if (p <= prev || p >= n - 1) {
      return `masked_lm_positions[${k}] = ${p} is not ascending inside 1..${n - 2}`;
    }
    prev = p;
    const id = idAt(v, layout, base + layout.maskedLmIds, k);
    if (id < 0 || id >= vocabSize) {
      return `masked_lm_ids[${k}] = ${id} is outside the vocabulary (${vocabSize})`;
    }
  }
  return null;
}

/** The record at `base` as plain unpadded arrays (call recordProblem first). */
export function decodeRecord(v: Views, layout: RecordLayout, base: number): Instance {
  const n = v.u16[(base + layout.numTokens) >>> 1];
  const m = v.u16[(base + layout.numMasked) >>> 1];
  const pos = (base + layout.maskedLmPositions) >>> 1;
  const inputIds: number[] = [], maskedLmPositions: number[] = [], maskedLmIds: number[] = [];
  for (let i = 0; i < n; i++) inputIds.push(idAt(v, layout, base + layout.inputIds, i));
  for (let k = 0; k < m; k++) {
    maskedLmPositions.push(v.u16[pos + k]);
    maskedLmIds.push(idAt(v, layout, base + layout.maskedLmIds, k));
  }
  return {
    inputIds,
    segmentBStart: v.u16[(base + layout.segmentBStart) >>> 1],
    maskedLmPositions,
    maskedLmIds,
    nextSentenceLabel: v.u8[base + layout.nextSentenceLabel],
  };
}
