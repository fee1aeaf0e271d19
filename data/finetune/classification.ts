/**
 * Sentence (pair) classification examples and their features, shared by GLUE and the built-in spam
 * task: `[CLS] a [SEP] (b [SEP])`, truncated longest-first and padded to the max sequence length, as
 * BERT's run_classifier makes them.
 */
import type { Tokenizer } from "../tokenizer/mod.ts";

export interface ClassificationExample {
  /** Where it came from, e.g. "train-12" or "spam-2/00123". */
  guid: string;
  textA: string;
  textB?: string;
  /** Class index; -1 when the split has no labels (GLUE test sets). */
  label: number;
}

export interface ClassificationFeature {
  input_ids: number[];
  token_type_ids: number[];
  attention_mask: number[];
  label: number;
}

export function classificationFeatures(
  examples: ClassificationExample[],
  tokenizer: Tokenizer,
  maxSeqLength: number,
): ClassificationFeature[] {
  return examples.map((ex) => ({
    ...tokenizer.encode(ex.textA, ex.textB, { maxLength: maxSeqLength, pad: true }),
    label: ex.label,
  }));
}
