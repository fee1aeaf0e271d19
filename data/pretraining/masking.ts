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
  private chosen: Uint8Array;
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
    this.order = new Int32Array(maxSeqLength);
    this.chosen = new Uint8Array(maxSeqLength);
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
    const { groupStart, groupLen, order, chosen } = this;
    const cont = this.wholeWordMask ? this.vocab.isContinuation : undefined;
    const sepA = segmentBStart - 1;
    let groups = 0;
    for (let i = 1; i < n - 1; i++) {
      if (i === sepA) continue;
      const prev = groups - 1;
      if (cont && prev >= 0 && cont[tokens[i]] && groupStart[prev] + groupLen[prev] === i) {
        groupLen[prev]++;
      } else {
        groupStart[groups] = i;
        groupLen[groups] = 1;
        order[groups] = groups;
        groups++;
      }
    }
    const numToPredict = Math.min(this.maxPredictions, Math.max(1, roundHalfEven(n * this.maskedLmProb)));
    for (let i = 0; i < n; i++) out[i] = tokens[i];
    chosen.fill(0, 0, n);
    let count = 0;
    const st = this.stats;
    for (let g = 0; g < groups && count < numToPredict; g++) {
      // The shuffle of all candidates, done lazily: a forward Fisher-Yates step fixes position g of a
      // uniformly random order, and usually ~20 of ~125 positions are ever looked at.
      const j = g + rng.below(groups - g);
      const pick = order[j];
      order[j] = order[g];
      order[g] = pick;
      const start = groupStart[pick], len = groupLen[pick];
      if (count + len > numToPredict) continue;
      for (let i = start; i < start + len; i++) {
        chosen[i] = 1;
        count++;
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
    // Positions come out sorted by sweeping the marks instead of sorting the list.
    let k = 0;
    for (let i = 1; i < n - 1; i++) {
      if (chosen[i]) {
        positions[k] = i;
        labels[k++] = tokens[i];
      }
    }
    st.masked += count;
    return count;
  }
}
