/**
 * Fill-mask: the text's literal "[MASK]"s become the mask token (elsewhere the tokenizer reads "[MASK]" as
 * ordinary text, as BERT does), the pre-training head's MLM logits at each mask give a softmax over the
 * vocabulary, and the top k tokens come back per mask with their probabilities.
 */
import { InputError } from "../model_io/infer_input.ts";
import type { EncodedRow, RowOutput, TextModel } from "./types.ts";

export const MASK_TEXT = "[MASK]";

export interface MaskGuess {
  token: string;
  id: number;
  score: number;
}

export interface FillMaskAnswer {
  /** The text with each mask replaced by its best token (continuation pieces joined to the word before). */
  filled: string;
  /** Per mask, in text order, the top k guesses. */
  masks: MaskGuess[][];
}

export interface PreparedFillMask {
  rows: EncodedRow[];
  finish(outputs: Map<string, RowOutput>, firstRow: number): FillMaskAnswer;
}

export function hasMask(text: string): boolean {
  return text.includes(MASK_TEXT);
}

/** The k largest entries of a softmax over `logits`, largest first (ties: lower id first). */
export function topK(logits: ArrayLike<number>, k: number): { id: number; p: number }[] {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
  const ids = Array.from({ length: logits.length }, (_, i) => i);
  ids.sort((a, b) => logits[b] - logits[a] || a - b);
  return ids.slice(0, k).map((id) => ({ id, p: Math.exp(logits[id] - max) / sum }));
}

export function prepareFillMask(
  model: TextModel,
  text: string,
  k: number,
  maxSeqLength: number,
  at: string,
): PreparedFillMask {
  const tok = model.tokenizer;
  const parts = text.split(MASK_TEXT);
  if (parts.length < 2) throw new InputError(`${at}: fill-mask needs ${MASK_TEXT} in the text`);
  const ids = [tok.special.cls];
  const positions: number[] = [];
  parts.forEach((part, i) => {
    if (i > 0) {
      positions.push(ids.length);
      ids.push(tok.special.mask);
    }
    ids.push(...tok.ids(part));
  });
  ids.push(tok.special.sep);
  const limit = Math.min(maxSeqLength, model.maxPositions);
  if (ids.length > limit) {
    throw new InputError(`${at}: the text has ${ids.length} tokens with [CLS] and [SEP], more than ${limit}`);
  }
  const row = { input_ids: ids, token_type_ids: ids.map(() => 0), attention_mask: ids.map(() => 1) };
  return {
    rows: [row],
    finish(outputs, r) {
      const out = outputs.get("prediction_logits")!;
      const [, s, v] = out.shape;
      const masks = positions.map((pos) =>
        topK(out.data.subarray((r * s + pos) * v, (r * s + pos + 1) * v), k).map(({ id, p }) => ({
          token: tok.idToToken(id),
          id,
          score: p,
        }))
      );
      let filled = parts[0];
      masks.forEach((m, i) => {
        const t = m[0].token;
        filled = (t.startsWith("##") ? filled.replace(/\s+$/, "") + t.slice(2) : filled + t) + parts[i + 1];
      });
      return { filled, masks };
    },
  };
}
