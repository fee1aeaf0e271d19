/**
 * BERT's basic tokenizer for one chunk: a run of text between whitespace and CJK characters (the
 * caller splits those off). It removes control characters, lower-cases and strips accents (for uncased
 * vocabularies) and splits punctuation into words of their own, and it remembers where each character
 * of each word came from in the chunk, so that callers can map tokens back to the original text.
 */
import { bmpTable, classify, CONTROL, PUNCT } from "./chars.ts";

export interface NormalizeOptions {
  /** Lower-case (Unicode full case mapping, as Python's str.lower()). */
  lowerCase: boolean;
  /** NFD, then drop combining marks (category Mn). BERT does this exactly when it lower-cases. */
  stripAccents: boolean;
}

/**
 * A word of a chunk after normalization and punctuation splitting. Code unit k of `text` came from
 * chunk units [starts[k], ends[k]); without maps, from [start + k, start + k + 1).
 */
export interface Word {
  text: string;
  start: number;
  starts?: number[];
  ends?: number[];
}

const MN = /\p{Mn}/gu;

export function normalizeText(s: string, opts: NormalizeOptions): string {
  if (opts.lowerCase) s = s.toLowerCase();
  if (opts.stripAccents) s = s.normalize("NFD").replace(MN, "");
  return s;
}

/** Splits a chunk (no whitespace or CJK inside) into normalized words. */
export function splitChunk(chunk: string, opts: NormalizeOptions): Word[] {
  const table = bmpTable();
  let plainAscii = true;
  for (let i = 0; i < chunk.length; i++) {
    const c = chunk.charCodeAt(i);
    if (c >= 0x80 || table[c] === CONTROL) {
      plainAscii = false;
      break;
    }
  }
  // ASCII without control characters: lower-casing maps one unit to one unit, accents do not occur.
  if (plainAscii) return splitPunct(opts.lowerCase ? chunk.toLowerCase() : chunk, undefined, undefined);
  return slowChunk(chunk, opts);
}

function slowChunk(chunk: string, opts: NormalizeOptions): Word[] {
  // Code points that survive control-character removal, with their spans in the chunk.
  const chars: string[] = [];
  const from: number[] = [];
  const to: number[] = [];
  for (let i = 0; i < chunk.length;) {
    const cp = chunk.codePointAt(i)!;
    const w = cp > 0xffff ? 2 : 1;
    if (classify(cp) !== CONTROL) {
      chars.push(chunk.slice(i, i + w));
      from.push(i);
      to.push(i + w);
    }
    i += w;
  }
  if (chars.length === 0) return [];
  const clean = chars.join("");
  if (!opts.lowerCase && !opts.stripAccents) {
    return splitPunct(clean, unitMap(chars, from), unitMap(chars, to));
  }
  // Normalize the whole chunk (case mapping has context, e.g. a final sigma), then try to attribute
  // the result to source characters by normalizing each one alone. When the pieces do not add up to
  // the whole, every unit is attributed to the whole chunk: the tokens stay right, offsets get coarse.
  const whole = normalizeText(clean, opts);
  const parts = chars.map((c) => normalizeText(c, opts));
  if (parts.join("") === whole) {
    return splitPunct(whole, unitMap(parts, from), unitMap(parts, to));
  }
  const s = new Array<number>(whole.length).fill(from[0]);
  const e = new Array<number>(whole.length).fill(to[to.length - 1]);
  return splitPunct(whole, s, e);
}

/** For each code unit of parts.join(""), the value `at` of the character it came from. */
function unitMap(parts: string[], at: number[]): number[] {
  const out: number[] = [];
  for (let i = 0; i < parts.length; i++) {
    for (let k = 0; k < parts[i].length; k++) out.push(at[i]);
  }
  return out;
}

/** Punctuation characters become words of their own; runs of anything else are words. */
function splitPunct(s: string, starts: number[] | undefined, ends: number[] | undefined): Word[] {
  const table = bmpTable();
  const words: Word[] = [];
  let ws = 0;
  const emit = (a: number, b: number) => {
    if (b <= a) return;
    if (starts) {
      words.push({
        text: s.slice(a, b),
        start: starts[a],
        starts: starts.slice(a, b),
        ends: ends!.slice(a, b),
      });
    } else {
      words.push({ text: s.slice(a, b), start: a });
    }
  };
  for (let i = 0; i < s.length;) {
    const c = s.charCodeAt(i);
    let cp = c;
    let w = 1;
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        cp = ((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000;
        w = 2;
      }
    }
    const cls = cp < 0x10000 ? table[cp] : classify(cp);
    if (cls === PUNCT) {
      emit(ws, i);
      emit(i, i + w);
      ws = i + w;
    }
    i += w;
  }
  emit(ws, s.length);
  return words;
}
