/**
 * A bag-of-words baseline for classification: multinomial Naive Bayes with add-one (Laplace) smoothing,
 * trained on the same train split the model sees and scored on the same dev set. Its words are the rows'
 * WordPiece ids (the attended positions, [CLS] and [SEP] included: every row has them once, in every
 * class alike). A word the training rows never hold is skipped when predicting, as the textbook does
 * (Jurafsky & Martin, ch. 4); ties go to the lower class id.
 */

export interface BagRow {
  readonly input_ids: readonly number[];
  readonly attention_mask: readonly number[];
  readonly label?: number;
}

/** Trains on `train` (every row labelled 0..classes-1) and returns the predicted class of each of `rows`. */
export function naiveBayesPredict(
  train: readonly BagRow[],
  rows: readonly BagRow[],
  classes: number,
): number[] {
  const counts = Array.from({ length: classes }, () => new Map<number, number>());
  const totals = new Array<number>(classes).fill(0), docs = new Array<number>(classes).fill(0);
  const vocab = new Set<number>();
  for (const r of train) {
    docs[r.label!]++;
    r.input_ids.forEach((id, i) => {
      if (!r.attention_mask[i]) return;
      counts[r.label!].set(id, (counts[r.label!].get(id) ?? 0) + 1);
      totals[r.label!]++;
      vocab.add(id);
    });
  }
  return rows.map((r) => {
    let best = 0, bestScore = -Infinity;
    for (let c = 0; c < classes; c++) {
      let score = Math.log(docs[c] / train.length);
      r.input_ids.forEach((id, i) => {
        if (r.attention_mask[i] && vocab.has(id)) {
          score += Math.log(((counts[c].get(id) ?? 0) + 1) / (totals[c] + vocab.size));
        }
      });
      if (score > bestScore) [best, bestScore] = [c, score];
    }
    return best;
  });
}

/** Dev accuracy of the baseline. */
export function naiveBayesAccuracy(
  train: readonly BagRow[],
  dev: readonly BagRow[],
  classes: number,
): number {
  const pred = naiveBayesPredict(train, dev, classes);
  return dev.length ? pred.filter((p, i) => p === dev[i].label).length / dev.length : 0;
}
