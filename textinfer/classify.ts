/**
 * Sequence classification from text: `[CLS] text [SEP] (pair [SEP])`, truncated longest-first to the
 * sequence length, through the classification head; softmax probabilities per label, or the raw value
 * when the head has one output (regression, e.g. STS-B).
 */
import { InputError } from "../model_io/infer_input.ts";
import type { EncodedRow, RowOutput, TextModel } from "./types.ts";

export type ClassifyAnswer =
  | { label: string; score: number; scores: Record<string, number>; truncated?: true }
  | { value: number; truncated?: true };

export interface PreparedClassify {
  rows: EncodedRow[];
  finish(outputs: Map<string, RowOutput>, firstRow: number): ClassifyAnswer;
}

export function softmax(xs: ArrayLike<number>): number[] {
  let max = -Infinity;
  for (let i = 0; i < xs.length; i++) max = Math.max(max, xs[i]);
  const e = Array.from(xs, (x) => Math.exp(x - max));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / sum);
}

export function prepareClassify(
  model: TextModel,
  text: string,
  pair: string | undefined,
  maxSeqLength: number,
  at: string,
): PreparedClassify {
  if (maxSeqLength > model.maxPositions) {
    throw new InputError(
      `${at}: --max-seq-length ${maxSeqLength} is more than the model's ${model.maxPositions} positions`,
    );
  }
  const tok = model.tokenizer;
  if (tok.ids(text).length === 0) throw new InputError(`${at}: the text is empty`);
  const full = tok.encode(text, pair).input_ids.length;
  const row = tok.encode(text, pair, { maxLength: maxSeqLength });
  const truncated = full > row.input_ids.length ? { truncated: true as const } : {};
  return {
    rows: [row],
    finish(outputs, r) {
      const logits = outputs.get("logits")!;
      const c = logits.shape[1];
      const v = logits.data.subarray(r * c, (r + 1) * c);
      if (c === 1) return { value: v[0], ...truncated };
      const p = softmax(v);
      let best = 0;
      p.forEach((x, i) => x > p[best] && (best = i));
      const labels = model.labels;
      return {
        label: labels[best],
        score: p[best],
        scores: Object.fromEntries(p.map((x, i) => [labels[i], x])),
        ...truncated,
      };
    },
  };
}
