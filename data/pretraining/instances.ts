/**
 * Pretraining instances (segment pairs for next-sentence prediction) from one document, following the
 * algorithm of Google's BERT create_pretraining_data.py:
 *
 * - the target length is max_seq_length - 3, or with probability short_seq_prob a random length in
 *   [2, that] (drawn once per document, as the original does);
 * - sentences accumulate into a chunk until the chunk reaches the target or the document ends;
 * - a random split point a_end in [1, chunk segments - 1] makes segment A; with probability 0.5, or
 *   always when the chunk has one segment, B is taken from a random other document (from a random
 *   sentence on, until the B target is met) and the chunk's unused sentences are put back; otherwise B is
 *   the rest of the chunk;
 * - the pair is truncated to max_seq_length - 3 tokens, removing from the longer one (B on ties), from
 *   the front or back at random;
 * - tokens are [CLS] A [SEP] B [SEP], then masked (masking.ts).
 *
 * Segments are contiguous ranges of the flat corpus, so nothing is copied until the final sequence.
 */
import type { TokenCorpus } from "./documents.ts";
import { Masker, type MaskVocab } from "./masking.ts";
import type { Rng } from "./rng.ts";

export interface InstanceSettings {
  maxSeqLength: number;
  maxPredictionsPerSeq: number;
  maskedLmProb: number;
  shortSeqProb: number;
  wholeWordMask: boolean;
}

export interface InstanceVocab extends MaskVocab {
  cls: number;
  sep: number;
}

/** The instance just made; the arrays are reused for the next one. */
export interface Made {
  /** Unmasked [CLS] A [SEP] B [SEP]. */
  tokens: Int32Array;
  /** What the model sees (masked). */
  input: Int32Array;
  n: number;
  segmentBStart: number;
  positions: Int32Array;
  labels: Int32Array;
  numMasked: number;
  isRandomNext: boolean;
  /** The segments as flat corpus ranges [start, end), after truncation. */
  a: [number, number];
  b: [number, number];
}

export interface InstanceStats {
  instances: number;
  randomNext: number;
  /** Random next forced because the chunk had a single segment (not a coin flip). */
  forcedRandomNext: number;
  tokens: number;
}

export class InstanceMaker {
  readonly masker: Masker;
  readonly stats: InstanceStats = { instances: 0, randomNext: 0, forcedRandomNext: 0, tokens: 0 };
  private made: Made;

  constructor(
    private readonly corpus: TokenCorpus,
    private readonly settings: InstanceSettings,
    private readonly vocab: InstanceVocab,
  ) {
    const S = settings.maxSeqLength, P = settings.maxPredictionsPerSeq;
    if (S < 5) throw new RangeError(`max_seq_length ${S} leaves no room for two segments`);
    this.masker = new Masker(vocab, P, settings.maskedLmProb, settings.wholeWordMask, S);
    this.made = {
      tokens: new Int32Array(S),
      input: new Int32Array(S),
      n: 0,
      segmentBStart: 0,
      positions: new Int32Array(P),
      labels: new Int32Array(P),
      numMasked: 0,
      isRandomNext: false,
      a: [0, 0],
      b: [0, 0],
    };
  }

  /** Makes the instances of document `doc`, handing each to `emit` (which must not keep the arrays). */
  fromDocument(rng: Rng, doc: number, emit: (m: Made) => void): void {
    const { sentenceStarts: ss, docStarts } = this.corpus;
    const numDocs = docStarts.length - 1;
    const maxNumTokens = this.settings.maxSeqLength - 3;
    let target = maxNumTokens;
    if (rng.random() < this.settings.shortSeqProb) target = rng.randint(2, maxNumTokens);

    const last = docStarts[doc + 1] - 1;
    let chunkFirst = 0, chunkLen = 0, curLength = 0;
    for (let i = docStarts[doc]; i <= last; i++) {
      if (chunkLen === 0) chunkFirst = i;
      chunkLen++;
      curLength += ss[i + 1] - ss[i];
      if (i !== last && curLength < target) continue;

      const aEndSeg = chunkLen >= 2 ? rng.randint(1, chunkLen - 1) : 1;
      let aStart = ss[chunkFirst], aEnd = ss[chunkFirst + aEndSeg];
      let bStart: number, bEnd: number;
      let isRandomNext = false;
      if (chunkLen === 1 || rng.random() < 0.5) {
        isRandomNext = true;
        if (chunkLen === 1) this.stats.forcedRandomNext++;
        const targetB = target - (aEnd - aStart);
        // Ten tries at a different document, as the original (a one-document corpus uses itself).
        let other = 0;
        for (let t = 0; t < 10; t++) {
          other = rng.randint(0, numDocs - 1);
          if (other !== doc) break;
        }
        const from = rng.randint(docStarts[other], docStarts[other + 1] - 1);
        bStart = ss[from];
        bEnd = bStart;
        for (let j = from; j < docStarts[other + 1]; j++) {
          bEnd = ss[j + 1];
          if (bEnd - bStart >= targetB) break;
        }
        // The sentences after A were not used: the next chunk starts with them.
        i -= chunkLen - aEndSeg;
      } else {
        bStart = aEnd;
        bEnd = ss[chunkFirst + chunkLen];
      }

      while ((aEnd - aStart) + (bEnd - bStart) > maxNumTokens) {
        if (aEnd - aStart > bEnd - bStart) {
          if (rng.random() < 0.5) aStart++;
          else aEnd--;
        } else {
          if (rng.random() < 0.5) bStart++;
          else bEnd--;
        }
      }
      this.emitPair(rng, aStart, aEnd, bStart, bEnd, isRandomNext, emit);
      chunkLen = 0;
      curLength = 0;
    }
  }

  private emitPair(
    rng: Rng,
    aStart: number,
    aEnd: number,
    bStart: number,
    bEnd: number,
    isRandomNext: boolean,
    emit: (m: Made) => void,
  ): void {
    const m = this.made;
    const ids = this.corpus.ids;
    const t = m.tokens;
    // Element loops rather than set(subarray): no view objects for the GC, at 100k+ instances.
    let n = 0;
    t[n++] = this.vocab.cls;
    for (let i = aStart; i < aEnd; i++) t[n++] = ids[i];
    t[n++] = this.vocab.sep;
    const sb = n;
    for (let i = bStart; i < bEnd; i++) t[n++] = ids[i];
    n++;
    t[n - 1] = this.vocab.sep;
    m.n = n;
    m.segmentBStart = sb;
    m.isRandomNext = isRandomNext;
    m.a[0] = aStart;
    m.a[1] = aEnd;
    m.b[0] = bStart;
    m.b[1] = bEnd;
    m.numMasked = this.masker.mask(rng, t, n, sb, m.input, m.positions, m.labels);
    this.stats.instances++;
    this.stats.tokens += n;
    if (isRandomNext) this.stats.randomNext++;
    emit(m);
  }
}
