/**
 * From start/end logits back to answer text, as BERT's write_predictions does it: for each example, the
 * n best start and n best end positions of each of its features, pairs that lie in the context, in order,
 * no longer than maxAnswerLength tokens and starting where the window has the most context; the best
 * distinct texts with softmax probabilities. For SQuAD v2.0 the null answer ([CLS], the text "") competes:
 * it wins when its score beats the best span's by more than nullScoreDiffThreshold.
 *
 * The text of a span is the original context from the first token's first character to the last
 * token's last character, so it keeps the context's case and accents (BERT re-aligns a detokenized
 * string with get_final_text for this; character offsets make that unnecessary).
 */
import type { SquadExample, SquadFeature } from "./squad.ts";
import { DatasetError } from "./errors.ts";

export interface SquadLogits {
  start_logits: ArrayLike<number>;
  end_logits: ArrayLike<number>;
}

export interface PostprocessOptions {
  nBest?: number;
  maxAnswerLength?: number;
  /** SQuAD v2.0: consider the null answer. */
  v2?: boolean;
  nullScoreDiffThreshold?: number;
}

export interface NBestEntry {
  text: string;
  probability: number;
  start_logit: number;
  end_logit: number;
  /** The answer's characters in the context, [start, end); 0 and 0 for the null answer. */
  start: number;
  end: number;
}

export interface SquadPrediction {
  id: string;
  /** The predicted answer; "" for "no answer" (v2.0). */
  text: string;
  nbest: NBestEntry[];
  /** v2.0: null score minus the best span's score (the value thresholded). */
  nullScoreDiff?: number;
}

/** Indices of the n largest values, largest first (ties: lower index first). */
function bestIndexes(xs: ArrayLike<number>, n: number): number[] {
  return Array.from({ length: xs.length }, (_, i) => i).sort((a, b) => xs[b] - xs[a] || a - b).slice(0, n);
}

interface Candidate {
  text: string;
  start_logit: number;
  end_logit: number;
  start: number;
  end: number;
}

export function squadPredictions(
  examples: SquadExample[],
  features: SquadFeature[],
  results: SquadLogits[],
  opts: PostprocessOptions = {},
): SquadPrediction[] {
  const { nBest = 20, maxAnswerLength = 30, v2 = false, nullScoreDiffThreshold = 0 } = opts;
  if (results.length !== features.length) {
    throw new DatasetError(`SQuAD: ${results.length} results for ${features.length} features`);
  }
  const byExample = examples.map(() => [] as number[]);
  features.forEach((f, i) => byExample[f.exampleIndex].push(i));
  return examples.map((ex, e) => {
    const cands: Candidate[] = [];
    let nullScore = Infinity;
    let nullCand: Candidate | undefined;
    for (const fi of byExample[e]) {
      const f = features[fi], r = results[fi];
      if (r.start_logits.length !== f.input_ids.length || r.end_logits.length !== f.input_ids.length) {
        throw new DatasetError(`SQuAD: logits of feature ${fi} do not have ${f.input_ids.length} positions`);
      }
      if (v2 && r.start_logits[0] + r.end_logits[0] < nullScore) {
        nullScore = r.start_logits[0] + r.end_logits[0];
        nullCand = { text: "", start_logit: r.start_logits[0], end_logit: r.end_logits[0], start: 0, end: 0 };
      }
      const ends = bestIndexes(r.end_logits, nBest);
      for (const s of bestIndexes(r.start_logits, nBest)) {
        if (f.charStart[s] < 0 || !f.tokenIsMaxContext[s]) continue;
        for (const en of ends) {
          if (f.charStart[en] < 0 || en < s || en - s + 1 > maxAnswerLength) continue;
          cands.push({
            text: ex.context.slice(f.charStart[s], f.charEnd[en]),
            start_logit: r.start_logits[s],
            end_logit: r.end_logits[en],
            start: f.charStart[s],
            end: f.charEnd[en],
          });
        }
      }
    }
    if (nullCand) cands.push(nullCand);
    // Stable sort: among equal scores the earlier feature and start win, as in BERT.
    cands.sort((a, b) => (b.start_logit + b.end_logit) - (a.start_logit + a.end_logit));
    const seen = new Set<string>();
    const best: Candidate[] = [];
    for (const c of cands) {
      if (best.length >= nBest) break;
      if (seen.has(c.text)) continue;
      seen.add(c.text);
      best.push(c);
    }
    if (nullCand && !seen.has("")) best.push(nullCand);
    if (best.length === 0) best.push({ text: "", start_logit: 0, end_logit: 0, start: 0, end: 0 });
    const scores = best.map((c) => c.start_logit + c.end_logit);
    const max = Math.max(...scores);
    const exps = scores.map((s) => Math.exp(s - max));
    const sum = exps.reduce((a, b) => a + b, 0);
    const nbest = best.map((c, i) => ({ ...c, probability: exps[i] / sum }));
    const bestSpan = best.find((c) => c !== nullCand);
    if (!v2) return { id: ex.id, text: bestSpan?.text ?? "", nbest };
    if (!bestSpan) return { id: ex.id, text: "", nbest, nullScoreDiff: Infinity };
    const diff = nullScore - (bestSpan.start_logit + bestSpan.end_logit);
    return {
      id: ex.id,
      text: diff > nullScoreDiffThreshold ? "" : bestSpan.text,
      nbest,
      nullScoreDiff: diff,
    };
  });
}
