/**
 * The tokenizer a pre-training checkpoint carries: the one the shards were made with, as their manifest
 * records it (source, casing, SHA-256 of the tokens in id order). The vocabulary is read again from its
 * source and used only when its hash matches, so a checkpoint never carries a vocabulary other than the
 * one its ids mean; when the source is gone or changed, the reason comes back instead.
 */
import { loadTokenizer, type Tokenizer } from "../data/tokenizer/mod.ts";
import { vocabHash } from "../data/pretraining/vocab.ts";
import type { Manifest } from "../data/shards/manifest.ts";
import type { HfTokenizerPart } from "../model_io/hf_head_files.ts";

const BUILT_IN = "built-in bert-base-uncased";

/** The tokens and casing of a tokenizer, as model_io/hf_head_files.ts writes them. */
export function tokenizerPart(tok: Tokenizer): HfTokenizerPart {
  const tokens: string[] = [];
  for (let id = 0; id < tok.vocabSize; id++) tokens.push(tok.idToToken(id));
  return { tokens, lowerCase: tok.lowerCase };
}

export async function shardTokenizer(
  manifest: Manifest,
): Promise<{ tokenizer: HfTokenizerPart } | { unavailable: string }> {
  const { source, lower_case, vocab_sha256 } = manifest.tokenizer;
  let tok: Tokenizer;
  try {
    tok = await loadTokenizer({ vocab: source === BUILT_IN ? undefined : source, cased: !lower_case });
  } catch (e) {
    return { unavailable: `the shards' vocabulary ${source} cannot be read (${(e as Error).message})` };
  }
  if (await vocabHash(tok) !== vocab_sha256) {
    return { unavailable: `the shards' vocabulary ${source} has changed since they were made` };
  }
  return { tokenizer: tokenizerPart(tok) };
}
