/**
 * The public face of the BERT WordPiece tokenizer. Other parts of the data pipeline (pretraining data,
 * fine-tuning features, the CLI) import only this file.
 */

/** Ids of the special tokens every BERT vocabulary has. */
export interface SpecialIds {
  pad: number;
  unk: number;
  cls: number;
  sep: number;
  mask: number;
}

export interface Tokenizer {
  readonly vocabSize: number;
  readonly lowerCase: boolean;
  readonly special: SpecialIds;
  tokenToId(token: string): number | undefined;
  idToToken(id: number): string;
  /** WordPiece tokens of `text`, without special tokens. */
  tokenize(text: string): { tokens: string[]; ids: number[] };
  /** `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, truncated longest-first to maxLength, optionally padded. */
  encode(
    a: string,
    b?: string,
    opts?: { maxLength?: number; pad?: boolean },
  ): { input_ids: number[]; token_type_ids: number[]; attention_mask: number[] };
}

/** A user mistake: unreadable or invalid vocabulary, bad options. */
export class TokenizerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TokenizerError";
  }
}

/** The built-in bert-base-uncased vocabulary (cached per casing). */
export function defaultTokenizer(_opts?: { cased?: boolean }): Promise<Tokenizer> {
  throw new Error("not implemented yet");
}

/** A vocab.txt or tokenizer.json; the built-in vocabulary when `vocab` is omitted. */
export function loadTokenizer(opts: { vocab?: string; cased?: boolean }): Promise<Tokenizer> {
  if (opts.vocab === undefined) return defaultTokenizer(opts);
  throw new Error("not implemented yet");
}
