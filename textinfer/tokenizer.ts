/**
 * The tokenizer of a checkpoint folder, from the texts of its files (no file system here, so a browser
 * can pass what a file picker read): vocab.txt with tokenizer_config.json's casing, as Hugging Face's
 * BertTokenizer reads them, or a tokenizer.json (its own normalizer settings). A vocabulary without
 * [PAD], [UNK], [CLS], [SEP] or [MASK] is a TokenizerError naming the file.
 */
import {
  bertSettings,
  BertTokenizer,
  parseTokenizerJson,
  parseVocabTxt,
  TokenizerError,
} from "../data/tokenizer/mod.ts";

export interface NamedText {
  /** The file's path or name, for messages. */
  name: string;
  text: string;
}

export interface TokenizerFiles {
  /** vocab.txt (preferred, as BertTokenizer) ... */
  vocabTxt?: NamedText;
  /** ... or tokenizer.json. */
  tokenizerJson?: NamedText;
  tokenizerConfig?: NamedText;
}

function parseJson(f: NamedText): unknown {
  try {
    return JSON.parse(f.text);
  } catch (e) {
    throw new TokenizerError(`${f.name}: invalid JSON: ${(e as Error).message}`);
  }
}

/** The casing tokenizer_config.json gives: do_lower_case (default true) and strip_accents (null: same). */
function casing(f: NamedText | undefined): { lowerCase: boolean; stripAccents: boolean; splitCjk: boolean } {
  const j = f ? parseJson(f) : {};
  if (typeof j !== "object" || j === null || Array.isArray(j)) {
    throw new TokenizerError(`${f!.name}: not a JSON object`);
  }
  const o = j as Record<string, unknown>;
  const flag = (k: string, dflt: boolean): boolean => {
    const v = o[k];
    if (v === undefined || v === null) return dflt;
    if (typeof v !== "boolean") throw new TokenizerError(`${f!.name}: "${k}" must be true, false or null`);
    return v;
  };
  const lowerCase = flag("do_lower_case", true);
  return {
    lowerCase,
    stripAccents: flag("strip_accents", lowerCase),
    splitCjk: flag("tokenize_chinese_chars", true),
  };
}

export function tokenizerFromFiles(files: TokenizerFiles, folder: string): BertTokenizer {
  if (files.vocabTxt) {
    const tokens = parseVocabTxt(files.vocabTxt.text, files.vocabTxt.name);
    return new BertTokenizer({
      tokens,
      ...bertSettings(false),
      ...casing(files.tokenizerConfig),
      source: files.vocabTxt.name,
    });
  }
  if (files.tokenizerJson) {
    return new BertTokenizer(parseTokenizerJson(parseJson(files.tokenizerJson), files.tokenizerJson.name));
  }
  throw new TokenizerError(
    `${folder}: no vocab.txt or tokenizer.json (text input needs the checkpoint's tokenizer beside config.json)`,
  );
}
