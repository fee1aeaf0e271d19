/**
 * The BERT WordPiece tokenizer: text -> chunks (split at whitespace and around CJK characters) ->
 * basic tokenization of each chunk (basic.ts) -> WordPiece (wordpiece.ts). Chunks repeat a lot in real
 * text ("the", "said,"), so each chunk's pieces are memoized; that is most of the speed.
 */
import { bmpTable, CJK, classify, SPACE } from "./chars.ts";
import { type NormalizeOptions, splitChunk } from "./basic.ts";
import { TokenizerError } from "./errors.ts";
import type { VocabConfig } from "./vocab.ts";
import { type Pieces, WordPiece } from "./wordpiece.ts";
import { assemble, type Encoded, type EncodeOptions } from "./encode.ts";
import type { SpecialIds, Tokenizer } from "./types.ts";

/** Tokens with [start, end) UTF-16 offsets into the tokenized text. */
export interface TokensWithOffsets {
  tokens: string[];
  ids: number[];
  starts: number[];
  ends: number[];
}

/** Pieces of one chunk, offsets relative to the chunk. */
type Entry = Pieces;

/** Enough for the distinct chunks of a large corpus; cleared wholesale when full (simple, bounded). */
const CACHE_LIMIT = 1 << 18;

export class BertTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly lowerCase: boolean;
  readonly special: SpecialIds;
  readonly source: string;
  private readonly vocab = new Map<string, number>();
  private readonly tokens: string[];
  private readonly wordpiece: WordPiece;
  private readonly norm: NormalizeOptions;
  private readonly splitCjk: boolean;
  private readonly table = bmpTable();
  private readonly cache = new Map<string, Entry>();

  constructor(cfg: VocabConfig) {
    this.tokens = cfg.tokens;
    this.vocabSize = cfg.tokens.length;
    // A duplicated entry maps to its last id, as in BERT's and Hugging Face's vocab loaders.
    cfg.tokens.forEach((t, i) => this.vocab.set(t, i));
    const need = (t: string) => {
      const id = this.vocab.get(t);
      if (id === undefined) throw new TokenizerError(`${cfg.source}: the vocabulary has no ${t} token`);
      return id;
    };
    this.special = {
      pad: need("[PAD]"),
      unk: need(cfg.unkToken),
      cls: need("[CLS]"),
      sep: need("[SEP]"),
      mask: need("[MASK]"),
    };
    this.lowerCase = cfg.lowerCase;
    this.norm = { lowerCase: cfg.lowerCase, stripAccents: cfg.stripAccents };
    this.splitCjk = cfg.splitCjk;
    this.source = cfg.source;
    this.wordpiece = new WordPiece(this.vocab, {
      unkId: this.special.unk,
      prefix: cfg.prefix,
      maxInputChars: cfg.maxInputChars,
    });
  }

  tokenToId(token: string): number | undefined {
    return this.vocab.get(token);
  }

  idToToken(id: number): string {
    const t = this.tokens[id];
    if (t === undefined || !Number.isInteger(id)) {
      throw new TokenizerError(`token id ${id} is outside the vocabulary (size ${this.vocabSize})`);
    }
    return t;
  }

  tokenize(text: string): { tokens: string[]; ids: number[] } {
    const ids = this.ids(text);
    return { tokens: ids.map((id) => this.tokens[id]), ids };
  }

  /** Token ids only (what the data pipeline needs; skips building the token strings). */
  ids(text: string): number[] {
    const out: number[] = [];
    this.scan(text, out, undefined, undefined);
    return out;
  }

  /** Tokens with their spans in `text`; a span covers the characters the token was made from. */
  tokenizeWithOffsets(text: string): TokensWithOffsets {
    const ids: number[] = [];
    const starts: number[] = [];
    const ends: number[] = [];
    this.scan(text, ids, starts, ends);
    return { tokens: ids.map((id) => this.tokens[id]), ids, starts, ends };
  }

  encode(a: string, b?: string, opts: EncodeOptions = {}): Encoded {
    return assemble(this.special, this.ids(a), b === undefined ? undefined : this.ids(b), opts);
  }

  private scan(text: string, ids: number[], starts?: number[], ends?: number[]): void {
    const table = this.table;
    const n = text.length;
    let start = -1;
    for (let i = 0; i < n; i++) {
      const c = text.charCodeAt(i);
      let cls: number;
      let w = 1;
      if (c >= 0xd800 && c <= 0xdbff && i + 1 < n) {
        const d = text.charCodeAt(i + 1);
        if (d >= 0xdc00 && d <= 0xdfff) {
          cls = classify(((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000);
          w = 2;
        } else cls = table[c];
      } else cls = table[c];
      if (cls === SPACE) {
        if (start >= 0) this.chunk(text, start, i, ids, starts, ends);
        start = -1;
      } else if (cls === CJK && this.splitCjk) {
        if (start >= 0) this.chunk(text, start, i, ids, starts, ends);
        this.chunk(text, i, i + w, ids, starts, ends);
        start = -1;
      } else if (start < 0) {
        // Control characters join the chunk; basic tokenization removes them (BERT joins the text
        // around a removed character: "a\u0001b" is one word).
        start = i;
      }
      i += w - 1;
    }
    if (start >= 0) this.chunk(text, start, n, ids, starts, ends);
  }

  private chunk(text: string, s: number, e: number, ids: number[], starts?: number[], ends?: number[]) {
    const key = text.slice(s, e);
    let entry = this.cache.get(key);
    if (entry === undefined) {
      entry = this.pieces(key);
      if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
      this.cache.set(key, entry);
    }
    const m = entry.ids.length;
    for (let k = 0; k < m; k++) ids.push(entry.ids[k]);
    if (starts && ends) {
      for (let k = 0; k < m; k++) {
        starts.push(s + entry.starts[k]);
        ends.push(s + entry.ends[k]);
      }
    }
  }

  private pieces(chunk: string): Entry {
    const out: Entry = { ids: [], starts: [], ends: [] };
    const tmp: Pieces = { ids: [], starts: [], ends: [] };
    for (const word of splitChunk(chunk, this.norm)) {
      tmp.ids.length = tmp.starts.length = tmp.ends.length = 0;
      this.wordpiece.split(word.text, tmp);
      for (let k = 0; k < tmp.ids.length; k++) {
        const a = tmp.starts[k], b = tmp.ends[k];
        out.ids.push(tmp.ids[k]);
        if (word.starts && word.ends) {
          out.starts.push(word.starts[a]);
          out.ends.push(word.ends[b - 1]);
        } else {
          out.starts.push(word.start + a);
          out.ends.push(word.start + b);
        }
      }
    }
    return out;
  }
}
