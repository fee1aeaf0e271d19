/**
 * WordPiece: greedy longest-match-first splitting of one word into vocabulary pieces, continuations
 * spelled with a prefix ("##"). A word longer than maxInputChars characters, or one with a part no piece
 * matches, becomes the unknown token as a whole (BERT's rule).
 */

export interface WordPieceOptions {
  unkId: number;
  /** Prefix of continuation pieces, "##" in BERT vocabularies. */
  prefix: string;
  /** Longer words (in code points) are unknown; 100 in BERT. */
  maxInputChars: number;
}

/** Output of split(): ids and [start, end) code-unit spans inside the word, appended in place. */
export interface Pieces {
  ids: number[];
  starts: number[];
  ends: number[];
}

export class WordPiece {
  /** Word-initial pieces: every vocabulary entry. */
  private readonly first: Map<string, number>;
  /** Continuation pieces keyed without their prefix, so lookups need no string concatenation. */
  private readonly cont = new Map<string, number>();
  /** The longest key of either map, in code units: no match can be longer. */
  private readonly maxUnits: number;

  constructor(vocab: Map<string, number>, readonly opts: WordPieceOptions) {
    this.first = vocab;
    let max = 1;
    for (const [tok, id] of vocab) {
      if (opts.prefix !== "" && tok.startsWith(opts.prefix) && tok.length > opts.prefix.length) {
        const k = tok.slice(opts.prefix.length);
        if (!this.cont.has(k)) this.cont.set(k, id);
        max = Math.max(max, k.length);
      }
      max = Math.max(max, tok.length);
    }
    this.maxUnits = max;
  }

  split(word: string, out: Pieces): void {
    const n = word.length;
    if (n > this.opts.maxInputChars && codePoints(word) > this.opts.maxInputChars) {
      this.unknown(n, out);
      return;
    }
    // Most words are vocabulary entries: one lookup.
    const whole = this.first.get(word);
    if (whole !== undefined) {
      out.ids.push(whole);
      out.starts.push(0);
      out.ends.push(n);
      return;
    }
    const mark = out.ids.length;
    let start = 0;
    while (start < n) {
      const map = start === 0 ? this.first : this.cont;
      let end = Math.min(n, start + this.maxUnits);
      if (end < n && isLow(word.charCodeAt(end))) end--;
      let id: number | undefined;
      while (end > start) {
        id = map.get(word.slice(start, end));
        if (id !== undefined) break;
        end--;
        if (end > start && isLow(word.charCodeAt(end))) end--;
      }
      if (id === undefined) {
        out.ids.length = out.starts.length = out.ends.length = mark;
        this.unknown(n, out);
        return;
      }
      out.ids.push(id);
      out.starts.push(start);
      out.ends.push(end);
      start = end;
    }
  }

  private unknown(n: number, out: Pieces): void {
    out.ids.push(this.opts.unkId);
    out.starts.push(0);
    out.ends.push(n);
  }
}

function isLow(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff;
}

function codePoints(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) if (!isLow(s.charCodeAt(i))) n++;
  return n;
}
