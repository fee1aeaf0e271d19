/**
 * Model inputs from token ids: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]` with segment ids 0 for the
 * first part and 1 for the second, BERT's longest-first pair truncation and padding.
 */
import { TokenizerError } from "./errors.ts";
import type { SpecialIds } from "./types.ts";

export interface EncodeOptions {
  /** Total length including special tokens; longer inputs are truncated. */
  maxLength?: number;
  /** Pad to maxLength with [PAD] (attention_mask 0, token_type_ids 0). */
  pad?: boolean;
}

export interface Encoded {
  input_ids: number[];
  token_type_ids: number[];
  attention_mask: number[];
}

/**
 * BERT's _truncate_seq_pair: drop the last token of the longer sequence until the pair fits (of equal
 * lengths, b loses one). Returns the kept lengths; the arrays are not touched.
 */
export function truncatePair(lenA: number, lenB: number, budget: number): [number, number] {
  let a = lenA, b = lenB;
  while (a + b > budget) {
    if (a > b) a--;
    else b--;
  }
  return [a, b];
}

export function assemble(special: SpecialIds, a: number[], b: number[] | undefined, opts: EncodeOptions) {
  const { maxLength, pad = false } = opts;
  const extra = b === undefined ? 2 : 3;
  if (maxLength !== undefined && (!Number.isInteger(maxLength) || maxLength < extra)) {
    throw new TokenizerError(
      `maxLength must be an integer of at least ${extra} (room for the special tokens), got ${maxLength}`,
    );
  }
  if (pad && maxLength === undefined) throw new TokenizerError("padding needs a maxLength");
  let la = a.length, lb = b?.length ?? 0;
  if (maxLength !== undefined) [la, lb] = truncatePair(la, lb, maxLength - extra);
  const input_ids = [special.cls];
  const token_type_ids = [0];
  for (let i = 0; i < la; i++) input_ids.push(a[i]), token_type_ids.push(0);
  input_ids.push(special.sep), token_type_ids.push(0);
  if (b !== undefined) {
    for (let i = 0; i < lb; i++) input_ids.push(b[i]), token_type_ids.push(1);
    input_ids.push(special.sep), token_type_ids.push(1);
  }
  const attention_mask = new Array<number>(input_ids.length).fill(1);
  if (pad && maxLength !== undefined) {
    while (input_ids.length < maxLength) {
      input_ids.push(special.pad), token_type_ids.push(0), attention_mask.push(0);
    }
  }
  return { input_ids, token_type_ids, attention_mask };
}
