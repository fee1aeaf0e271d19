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
