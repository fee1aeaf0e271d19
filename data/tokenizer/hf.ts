/**
 * The same vocabulary and settings as a Tokenizer of the npm package @huggingface/tokenizers (BERT
 * normalizer, BERT pre-tokenizer, WordPiece). Not our tokenizer: it is a second implementation that the
 * tests and the benchmark compare ours with (ours is faster, and follows BERT where this one differs:
 * see tests/cpu/data_tokenizer_hf.test.ts).
 */
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import type { VocabConfig } from "./vocab.ts";

export function hfTokenizer(cfg: VocabConfig): HfTokenizer {
  const vocab: Record<string, number> = {};
  cfg.tokens.forEach((t, i) => vocab[t] = i);
  const id = (t: string) => vocab[t];
  const json = {
    normalizer: {
      type: "BertNormalizer",
      clean_text: true,
      handle_chinese_chars: cfg.splitCjk,
      strip_accents: cfg.stripAccents,
      lowercase: cfg.lowerCase,
    },
    pre_tokenizer: { type: "BertPreTokenizer" },
    model: {
      type: "WordPiece",
      unk_token: cfg.unkToken,
      continuing_subword_prefix: cfg.prefix,
      max_input_chars_per_word: cfg.maxInputChars,
      vocab,
    },
    post_processor: { type: "BertProcessing", sep: ["[SEP]", id("[SEP]")], cls: ["[CLS]", id("[CLS]")] },
    decoder: { type: "WordPiece", prefix: cfg.prefix, cleanup: true },
    added_tokens: [],
  };
  return new HfTokenizer(json, { do_lower_case: cfg.lowerCase });
}
