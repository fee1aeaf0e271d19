/**
 * The official SQuAD scores: exact match and token F1 after normalizing answers (lower-case, ASCII
 * punctuation removed, articles a/an/the removed, whitespace collapsed), the best over the gold answers.
 * An unanswerable v2.0 question has the single gold answer "".
 */
import type { SquadExample } from "./squad.ts";

const PUNCT = new Set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~");

export function normalizeAnswer(s: string): string {
  const lower = s.toLowerCase();
  let noPunct = "";
  for (const ch of lower) if (!PUNCT.has(ch)) noPunct += ch;
  // Python's \b is Unicode-aware: a word character is a letter, digit or underscore of any script.
  return noPunct.replace(/(?<![\p{L}\p{N}_])(a|an|the)(?![\p{L}\p{N}_])/gu, " ").split(/\s+/).filter((w) => w)
    .join(" ");
}

export function exactMatch(prediction: string, gold: string): number {
  return normalizeAnswer(prediction) === normalizeAnswer(gold) ? 1 : 0;
}

export function f1Score(prediction: string, gold: string): number {
  const p = normalizeAnswer(prediction).split(" ").filter((w) => w);
  const g = normalizeAnswer(gold).split(" ").filter((w) => w);
  if (p.length === 0 || g.length === 0) return p.length === g.length ? 1 : 0;
  const counts = new Map<string, number>();
  for (const w of g) counts.set(w, (counts.get(w) ?? 0) + 1);
  let common = 0;
  for (const w of p) {
    const c = counts.get(w) ?? 0;
    if (c > 0) {
      common++;
      counts.set(w, c - 1);
    }
  }
  if (common === 0) return 0;
  const precision = common / p.length, recall = common / g.length;
  return (2 * precision * recall) / (precision + recall);
}

export interface SquadScores {
  /** Percentages over the examples that have a prediction. */
  exact: number;
  f1: number;
  total: number;
}

export function squadScores(examples: SquadExample[], predictions: Map<string, string>): SquadScores {
  let em = 0, f1 = 0, total = 0;
  for (const ex of examples) {
    const pred = predictions.get(ex.id);
    if (pred === undefined) continue;
    const golds = ex.answers.map((a) => a.text).filter((t) => normalizeAnswer(t) !== "");
    if (golds.length === 0) golds.push("");
    em += Math.max(...golds.map((g) => exactMatch(pred, g)));
    f1 += Math.max(...golds.map((g) => f1Score(pred, g)));
    total++;
  }
  return { exact: total ? (100 * em) / total : 0, f1: total ? (100 * f1) / total : 0, total };
}

/**
 * The official v1.1 script (evaluate-v1.1.py): every question of the data set counts (one without a
 * prediction scores 0), each against all its gold answers, F1 0 when no token is shared. Percentages.
 */
export function squadV1Eval(
  examples: SquadExample[],
  predictions: Map<string, string>,
): { exact_match: number; f1: number } {
  let em = 0, f1 = 0;
  const v1F1 = (p: string, g: string) => {
    // v1.1 has no empty-answer rule: no common token is 0, even for two empty answers.
    const pt = normalizeAnswer(p).split(" ").filter((w) => w),
      gt = normalizeAnswer(g).split(" ").filter((w) => w);
    return pt.length === 0 || gt.length === 0 ? 0 : f1Score(p, g);
  };
  for (const ex of examples) {
    const pred = predictions.get(ex.id);
    if (pred === undefined || ex.answers.length === 0) continue;
    em += Math.max(...ex.answers.map((a) => exactMatch(pred, a.text)));
    f1 += Math.max(...ex.answers.map((a) => v1F1(pred, a.text)));
  }
  const n = examples.length;
  return { exact_match: n ? (100 * em) / n : 0, f1: n ? (100 * f1) / n : 0 };
}

export interface SquadV2Eval {
  exact: number;
  f1: number;
  total: number;
  HasAns_exact?: number;
  HasAns_f1?: number;
  HasAns_total?: number;
  NoAns_exact?: number;
  NoAns_f1?: number;
  NoAns_total?: number;
  best_exact?: number;
  best_exact_thresh?: number;
  best_f1?: number;
  best_f1_thresh?: number;
}

/**
 * The official v2.0 script (evaluate-v2.0.py). exact/f1 and the HasAns/NoAns splits are what it prints
 * without --na-prob-file (questions without a prediction are left out). With `naProbs` (our
 * null_odds.json: null score minus the best span's score, per question) it adds best_exact/best_f1 and
 * their thresholds as its find_all_best_thresh does: questions in increasing na_prob order, each switched
 * from "no answer" to its prediction, keeping the threshold where the score is highest.
 */
export function squadV2Eval(
  examples: SquadExample[],
  predictions: Map<string, string>,
  naProbs?: Map<string, number>,
): SquadV2Eval {
  const hasAns = new Map<string, boolean>();
  const exact = new Map<string, number>(), f1 = new Map<string, number>();
  for (const ex of examples) {
    hasAns.set(ex.id, ex.answers.length > 0);
    const pred = predictions.get(ex.id);
    if (pred === undefined) continue;
    const golds = ex.answers.map((a) => a.text).filter((t) => normalizeAnswer(t) !== "");
    if (golds.length === 0) golds.push("");
    exact.set(ex.id, Math.max(...golds.map((g) => exactMatch(pred, g))));
    f1.set(ex.id, Math.max(...golds.map((g) => f1Score(pred, g))));
  }
  const mean = (s: Map<string, number>, ids?: string[]) => {
    const keys = ids ?? [...s.keys()];
    return keys.length ? (100 * keys.reduce((a, k) => a + s.get(k)!, 0)) / keys.length : 0;
  };
  const out: SquadV2Eval = { exact: mean(exact), f1: mean(f1), total: exact.size };
  const has = [...exact.keys()].filter((k) => hasAns.get(k)),
    no = [...exact.keys()].filter((k) => !hasAns.get(k));
  if (has.length) {
    Object.assign(out, {
      HasAns_exact: mean(exact, has),
      HasAns_f1: mean(f1, has),
      HasAns_total: has.length,
    });
  }
  if (no.length) {
    Object.assign(out, { NoAns_exact: mean(exact, no), NoAns_f1: mean(f1, no), NoAns_total: no.length });
  }
  if (naProbs) {
    const best = (scores: Map<string, number>) => {
      let cur = [...hasAns.values()].filter((h) => !h).length, bestScore = cur, bestThresh = 0;
      // Python's sorted() is stable: ties keep the predictions' order.
      const ids = [...naProbs.keys()].map((k, i) => [k, i] as const)
        .sort((a, b) => naProbs.get(a[0])! - naProbs.get(b[0])! || a[1] - b[1]).map(([k]) => k);
      for (const id of ids) {
        if (!scores.has(id)) continue;
        const diff = hasAns.get(id) ? scores.get(id)! : predictions.get(id) ? -1 : 0;
        cur += diff;
        if (cur > bestScore) {
          bestScore = cur;
          bestThresh = naProbs.get(id)!;
        }
      }
      return [scores.size ? (100 * bestScore) / scores.size : 0, bestThresh];
    };
    [out.best_exact, out.best_exact_thresh] = best(exact);
    [out.best_f1, out.best_f1_thresh] = best(f1);
  }
  return out;
}
