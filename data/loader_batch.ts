/**
 * Batches as the model takes them, and filling one row from a shard record. The record bytes are read
 * from the file into one staging buffer; this is the single copy from there into the batch arrays
 * (widening ids, expanding token_type_ids and attention_mask from the two stored lengths).
 */
import type { RecordLayout } from "./shards/format.ts";
import type { Views } from "./shards/record.ts";

/** One batch; every array is row-major [batchSize, seqLength] or [batchSize, maxPredictions]. */
export interface Batch {
  batchSize: number;
  seqLength: number;
  maxPredictions: number;
  input_ids: Int32Array;
  token_type_ids: Int32Array;
  attention_mask: Int32Array;
  /** Unused slots: 0. */
  masked_lm_positions: Int32Array;
  /** Unused slots: -1, the loss's ignore index. */
  masked_lm_ids: Int32Array;
  next_sentence_labels: Int32Array;
}

export function allocBatch(batchSize: number, seqLength: number, maxPredictions: number): Batch {
  const B = batchSize, S = seqLength, P = maxPredictions;
  return {
    batchSize,
    seqLength,
    maxPredictions,
    input_ids: new Int32Array(B * S),
    token_type_ids: new Int32Array(B * S),
    attention_mask: new Int32Array(B * S),
    masked_lm_positions: new Int32Array(B * P),
    masked_lm_ids: new Int32Array(B * P),
    next_sentence_labels: new Int32Array(B),
  };
}

/** Fills row `row` of `batch` from the record at byte `base` of the staging views (already checked). */
export function fillRow(batch: Batch, row: number, v: Views, layout: RecordLayout, base: number): void {
  const S = layout.seqLength, P = layout.maxPredictions;
  const n = v.u16[(base + layout.numTokens) >>> 1];
  const sb = v.u16[(base + layout.segmentBStart) >>> 1];
  const m = v.u16[(base + layout.numMasked) >>> 1];
  const o = row * S;
  const ids = batch.input_ids, types = batch.token_type_ids, att = batch.attention_mask;
  if (layout.idDtype === "u16") {
    const src = (base + layout.inputIds) >>> 1;
    for (let i = 0; i < S; i++) ids[o + i] = v.u16[src + i];
  } else {
    const src = (base + layout.inputIds) >>> 2;
    for (let i = 0; i < S; i++) ids[o + i] = v.i32[src + i];
  }
  types.fill(0, o, o + sb);
  types.fill(1, o + sb, o + n);
  types.fill(0, o + n, o + S);
  att.fill(1, o, o + n);
  att.fill(0, o + n, o + S);

  const q = row * P;
  const pos = (base + layout.maskedLmPositions) >>> 1;
  for (let k = 0; k < m; k++) batch.masked_lm_positions[q + k] = v.u16[pos + k];
  batch.masked_lm_positions.fill(0, q + m, q + P);
  if (layout.idDtype === "u16") {
    const src = (base + layout.maskedLmIds) >>> 1;
    for (let k = 0; k < m; k++) batch.masked_lm_ids[q + k] = v.u16[src + k];
  } else {
    const src = (base + layout.maskedLmIds) >>> 2;
    for (let k = 0; k < m; k++) batch.masked_lm_ids[q + k] = v.i32[src + k];
  }
  batch.masked_lm_ids.fill(-1, q + m, q + P);
  batch.next_sentence_labels[row] = v.u8[base + layout.nextSentenceLabel];
}
