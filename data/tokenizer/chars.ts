/**
 * Character classes of BERT's basic tokenizer, as the original BERT code defines them:
 *
 * - removed ("control"): U+0000, U+FFFD and every character of general category C (Cc, Cf, Cn, Co, Cs)
 *   except tab, newline and carriage return;
 * - whitespace: space, tab, newline, carriage return, category Zs, and U+2028/U+2029 (BERT's
 *   whitespace_tokenize splits with Python's str.split(), which splits on those two as well);
 * - punctuation: the ASCII symbols 33-47, 58-64, 91-96, 123-126 (so "$", "^", "`" count) and category P;
 * - CJK: the CJK Unified Ideographs blocks (and their extensions and compatibility blocks), each such
 *   character becomes a word of its own.
 *
 * The BMP is classified once into a table; the rare astral characters go through the regexes with a memo.
 */

export const OTHER = 0;
export const SPACE = 1;
export const CONTROL = 2;
export const PUNCT = 3;
export const CJK = 4;
export type CharClass = typeof OTHER | typeof SPACE | typeof CONTROL | typeof PUNCT | typeof CJK;

const RE_C = /^\p{C}$/u;
const RE_ZS = /^\p{Zs}$/u;
const RE_P = /^\p{P}$/u;

/** BERT's ranges of "Chinese characters" (Hangul and kana are not among them, as in BERT). */
export function isCjk(cp: number): boolean {
  return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
    (cp >= 0x20000 && cp <= 0x2a6df) || (cp >= 0x2a700 && cp <= 0x2b73f) ||
    (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b820 && cp <= 0x2ceaf) ||
    (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
}

function isAsciiPunct(cp: number): boolean {
  return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
    (cp >= 123 && cp <= 126);
}

function classifySlow(cp: number): CharClass {
  if (cp === 9 || cp === 10 || cp === 13 || cp === 32 || cp === 0x2028 || cp === 0x2029) return SPACE;
  const s = String.fromCodePoint(cp);
  if (cp === 0 || cp === 0xfffd || RE_C.test(s)) return CONTROL;
  if (RE_ZS.test(s)) return SPACE;
  if (isAsciiPunct(cp) || RE_P.test(s)) return PUNCT;
  if (isCjk(cp)) return CJK;
  return OTHER;
}

let bmp: Uint8Array | undefined;

/** The class of every BMP code unit (lone surrogates are category Cs, so removed). */
export function bmpTable(): Uint8Array {
  if (bmp) return bmp;
  const t = new Uint8Array(0x10000);
  for (let c = 0; c < 0x10000; c++) {
    t[c] = c >= 0xd800 && c <= 0xdfff ? CONTROL : classifySlow(c);
  }
  bmp = t;
  return t;
}

const astral = new Map<number, CharClass>();

/** The class of any code point. */
export function classify(cp: number): CharClass {
  if (cp < 0x10000) return bmpTable()[cp] as CharClass;
  let c = astral.get(cp);
  if (c === undefined) {
    c = classifySlow(cp);
    astral.set(cp, c);
  }
  return c;
}
