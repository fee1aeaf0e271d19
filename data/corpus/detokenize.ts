/**
 * Turns the Brown corpus's tokens back into ordinary text: punctuation attaches to the word before it,
 * opening brackets and quotes to the word after, and the corpus's `` and '' become straight double
 * quotes. A lone ' is a single quote: opening when none is open and a word follows, closing otherwise.
 */

const ATTACH_LEFT = new Set([",", ".", ";", ":", "?", "!", ")", "]", "}", "%", "''", "?'", "!'"]);
const ATTACH_RIGHT = new Set(["(", "[", "{", "``"]);
const SPELLING: Record<string, string> = { "``": '"', "''": '"' };

function isWordLike(token: string | undefined): boolean {
  return token !== undefined && /[A-Za-z0-9$]/.test(token);
}

export function detokenize(tokens: string[]): string {
  let out = "";
  let glue = true; // no space before the first token
  let singleOpen = false;
  for (let i = 0; i < tokens.length; i++) {
    const tok = tokens[i];
    let left = ATTACH_LEFT.has(tok);
    let right = ATTACH_RIGHT.has(tok);
    if (tok === "'") {
      if (!singleOpen && isWordLike(tokens[i + 1])) {
        right = true;
        singleOpen = true;
      } else {
        left = true;
        singleOpen = false;
      }
    }
    // "Jr." ending a sentence: the corpus adds the full stop as a token of its own.
    if (
      tok === "." && i > 0 && tokens[i - 1].length > 1 && tokens[i - 1].endsWith(".") &&
      isWordLike(tokens[i - 1])
    ) {
      continue;
    }
    if (!glue && !left) out += " ";
    out += SPELLING[tok] ?? tok;
    glue = right;
  }
  return out;
}
