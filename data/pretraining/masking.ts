/**
 * Masked-LM predictions as Google's BERT create_pretraining_data.py makes them: candidate positions are
 * all tokens except [CLS]/[SEP] (with whole-word masking, a word's "##" continuations join its first
 * piece), taken in a random order; num_to_predict = min(max_predictions, max(1, round(len * prob))); each chosen
 * position becomes [MASK] with probability 0.8, stays with 0.1, becomes a random vocabulary id with 0.1.
 * One deliberate difference: a continuation right after [SEP] starts its own candidate, where the
 * original would join it to the last word of segment A across the separator.
 */
import type { Rng } from "./rng.ts";

export interface MaskVocab {
  vocabSize: number;
  mask: number;
  /** 1 for ids whose token starts with "##"; only read with whole-word masking. */
  isContinuation?: Uint8Array;
}

/** Python's round(): halves go to the even neighbour. */
export function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** Counts of what masking did, summed over instances (for the closing report and tests). */
export interface MaskStats {
  masked: number;
  replacedByMask: number;
  keptOriginal: number;
  replacedByRandom: number;
}

export class Masker {
  private groupStart: Int32Array;
  private groupLen: Int32Array;
  private order: Int32Array;
  private swapped: Int32Array;
  readonly stats: MaskStats = { masked: 0, replacedByMask: 0, keptOriginal: 0, replacedByRandom: 0 };

  constructor(
    private readonly vocab: MaskVocab,
    private readonly maxPredictions: number,
    private readonly maskedLmProb: number,
    private readonly wholeWordMask: boolean,
    maxSeqLength: number,
  ) {
    this.groupStart = new Int32Array(maxSeqLength);
    this.groupLen = new Int32Array(maxSeqLength);
    this.order = Int32Array.from({ length: maxSeqLength }, (_, i) => i);
    this.swapped = new Int32Array(maxSeqLength);
  }

  /**
   * Masks `tokens[0..n)` = [CLS] A [SEP] B [SEP] with B starting at `segmentBStart`: writes the model
   * input to `out`, and the sorted masked positions with their original ids to `positions`/`labels`.
   * Returns the number of predictions.
   */
  mask(
    rng: Rng,
    tokens: Int32Array,
    n: number,
    segmentBStart: number,
    out: Int32Array,
    positions: Int32Array,
    labels: Int32Array,
  ): number {
    const { groupStart, groupLen, order, swapped } = this;
    const cont = this.wholeWordMask ? this.vocab.isContinuation : undefined;
    const sepA = segmentBStart - 1;
    // Without whole words, candidate c is position c + 1, skipping the middle [SEP]: no table needed.
    let groups = n - 3;
    if (cont) {
      groups = 0;
      for (let i = 1; i < n - 1; i++) {
        if (i === sepA) continue;
        const prev = groups - 1;
        if (prev >= 0 && cont[tokens[i]] && groupStart[prev] + groupLen[prev] === i) {
          groupLen[prev]++;
        } else {
          groupStart[groups] = i;
          groupLen[groups++] = 1;
        }
      }
    }
    const numToPredict = Math.min(this.maxPredictions, Math.max(1, roundHalfEven(n * this.maskedLmProb)));
    for (let i = 0; i < n; i++) out[i] = tokens[i];
    let count = 0, g = 0;
    const st = this.stats;
    for (; g < groups && count < numToPredict; g++) {
      // The shuffle of all candidates, done lazily: a forward Fisher-Yates step fixes place g of a
      // uniformly random order, and usually ~20 of ~125 places are ever looked at. `order` is the
      // identity between calls (the swaps are undone below), so it needs no O(n) reset.
      const j = g + rng.below(groups - g);
      const pick = order[j];
      order[j] = order[g];
      order[g] = pick;
      swapped[g] = j;
      const start = cont ? groupStart[pick] : pick + 1 >= sepA ? pick + 2 : pick + 1;
      const len = cont ? groupLen[pick] : 1;
      if (count + len > numToPredict) continue;
      for (let i = start; i < start + len; i++) {
        // Insertion into the sorted list of chosen positions (at most max_predictions long).
        let k = count++;
        while (k > 0 && positions[k - 1] > i) {
          positions[k] = positions[k - 1];
          labels[k] = labels[k - 1];
          k--;
        }
        positions[k] = i;
        labels[k] = tokens[i];
        if (rng.random() < 0.8) {
          out[i] = this.vocab.mask;
          st.replacedByMask++;
        } else if (rng.random() < 0.5) {
          st.keptOriginal++;
        } else {
          out[i] = rng.below(this.vocab.vocabSize);
          st.replacedByRandom++;
        }
      }
    }
    while (g-- > 0) {
      const j = swapped[g];
      const t = order[j];
      order[j] = order[g];
      order[g] = t;
    }
    st.masked += count;
    return count;
  }
}
