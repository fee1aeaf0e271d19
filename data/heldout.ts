/**
 * The held-out split of a pretraining shard folder, and the unigram baseline it is measured against.
 *
 * A shard holds whole documents (pretraining/plan.ts: all dupe_factor copies of a document's instances
 * land in its shard), so leaving the folder's last shard out of training leaves its documents unseen.
 * The held-out instances are that shard's first `limit` records in file order: the same ones for every
 * run of the folder. A folder of one shard, or `hold` false, has no held-out split (all of it trains).
 *
 * The unigram baseline answers every masked position with the masked target most frequent in the
 * training shards: what a model that learnt only word frequencies scores.
 */
import { Loader } from "./loader.ts";
import type { Batch } from "./loader_batch.ts";
import { readManifest } from "./shards/manifest.ts";

export type ShardRange = readonly [number, number];

export interface HeldOutSplit {
  readonly train: ShardRange;
  readonly heldOut?: ShardRange;
}

export async function heldOutSplit(dir: string, hold = true): Promise<HeldOutSplit> {
  const n = (await readManifest(dir)).shards.length;
  return n < 2 || !hold ? { train: [0, n] } : { train: [0, n - 1], heldOut: [n - 1, n] };
}

/** Reads the first `limit` records of `range` in file order, in batches; `each` gets the rows in use. */
async function scan(
  dir: string,
  range: ShardRange,
  limit: number,
  batchSize: number,
  each: (b: Batch, rows: number) => void,
): Promise<number> {
  const loader = await Loader.open(dir, { batchSize, shuffle: false, shardRange: range });
  try {
    const n = Math.min(limit, loader.records);
    for (let at = 0; at < n; at += batchSize) each(loader.next(), Math.min(batchSize, n - at));
    return n;
  } finally {
    loader.close();
  }
}

/** The six inputs of a pre-training step, in the order the model takes them. */
export const BATCH_INPUTS = [
  "input_ids",
  "token_type_ids",
  "attention_mask",
  "masked_lm_positions",
  "masked_lm_ids",
  "next_sentence_labels",
] as const;

/** One batch's figures from the device: MLM accuracy and mean loss over its scored labels, NSP accuracy. */
export type BatchFigures = readonly [mlmAccuracy: number, mlmLoss: number, nspAccuracy: number];

/** The held-out instances (in batches of the run's micro-batch) and the unigram baseline's answer. */
export class HeldOutSet {
  private constructor(readonly batches: Batch[], readonly instances: number, readonly unigramId: number) {}

  /**
   * `counts`: targetCounts of the training shards. The last batch's rows past the end (the loader wraps to
   * the first record) get labels -1, the losses' ignore index, so they count for nothing.
   */
  static async open(
    dir: string,
    counts: Float64Array,
    heldOut: ShardRange,
    limit: number,
    batchSize: number,
  ) {
    const batches: Batch[] = [];
    const instances = await scan(dir, heldOut, limit, batchSize, (b, rows) => {
      b.masked_lm_ids.fill(-1, rows * b.maxPredictions);
      b.next_sentence_labels.fill(-1, rows);
      batches.push(b);
    });
    return new HeldOutSet(batches, instances, unigramTarget(counts));
  }

  /**
   * Runs every batch and weights each batch's figures by its count of scored labels (known here), which
   * gives the figures over all held-out instances; the unigram baseline's accuracy on the same positions.
   */
  async measure(run: (b: Batch) => Promise<BatchFigures>) {
    let scored = 0, correct = 0, lossSum = 0, nspCorrect = 0, nspCount = 0;
    for (const b of this.batches) {
      const [acc, loss, nsp] = await run(b);
      const n = maskedTargets([b], -1).scored, rows = b.next_sentence_labels.filter((l) => l >= 0).length;
      [scored, correct, lossSum] = [scored + n, correct + acc * n, lossSum + loss * n];
      [nspCorrect, nspCount] = [nspCorrect + nsp * rows, nspCount + rows];
    }
    const per = (x: number) => x / Math.max(1, scored);
    return {
      heldout_instances: this.instances,
      heldout_mlm_accuracy: per(correct),
      heldout_mlm_loss: per(lossSum),
      heldout_nsp_accuracy: nspCorrect / Math.max(1, nspCount),
      unigram_mlm_accuracy: per(maskedTargets(this.batches, this.unigramId).equal),
    };
  }
}

/** How often each token id is a masked target, over every record of the training shards. */
export async function targetCounts(dir: string, range: ShardRange): Promise<Float64Array> {
  const counts = new Float64Array((await readManifest(dir)).vocab_size);
  await scan(dir, range, Infinity, 1024, (b, rows) => {
    for (const id of b.masked_lm_ids.subarray(0, rows * b.maxPredictions)) if (id >= 0) counts[id]++;
  });
  return counts;
}

/** The most frequent target (ties: the lower id). */
export const unigramTarget = (counts: Float64Array): number =>
  counts.reduce((best, c, id) => (c > counts[best] ? id : best), 0);

/**
 * Add-one smoothed log frequencies of the targets, padded to `vocabSize` (unseen ids count 0): a start for
 * the MLM decoder's bias. At zero, Adam moves each bias by at most the learning rate a step, far too slowly
 * for log frequencies spanning 10 nats, so the encoder learns to emit one vector pointing at the frequent
 * words instead and its output stops depending on the input (the unigram plateau).
 */
export function unigramLogits(counts: Float64Array, vocabSize: number): Float32Array {
  const total = counts.reduce((a, c) => a + c, 0) + vocabSize;
  return Float32Array.from({ length: vocabSize }, (_, id) => Math.log(((counts[id] ?? 0) + 1) / total));
}

/** Scored masked positions in batches, and how many of them equal `id` (the unigram's accuracy). */
export function maskedTargets(batches: readonly Batch[], id: number): { scored: number; equal: number } {
  let scored = 0, equal = 0;
  for (const b of batches) {
    for (const t of b.masked_lm_ids) {
      if (t >= 0) scored++;
      if (t === id) equal++;
    }
  }
  return { scored, equal };
}
