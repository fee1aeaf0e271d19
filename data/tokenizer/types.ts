/** The tokenizer's public types (re-exported by mod.ts). */

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
  /** The token of an id; a TokenizerError outside the vocabulary. */
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
