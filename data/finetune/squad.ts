/**
 * SQuAD v1.1 and v2.0 (JSON as published) to BERT features, as BERT's run_squad makes them: the question
 * (at most max_query_length tokens), then windows of the context tokenized as a whole, advancing by
 * doc_stride tokens, each `[CLS] question [SEP] window [SEP]` padded to max_seq_length.
 *
 * Every position of a feature keeps the character span of the context it came from (and the index of the
 * whitespace-separated context word), so predicted start/end positions become answer text by slicing the
 * original context (squad_post.ts); training features carry start/end positions, 0/0 ([CLS]) when the
 * answer is not inside the window or the question has none (v2.0).
 */
import type { BertTokenizer } from "../tokenizer/mod.ts";
import { DatasetError, readDataFile } from "./errors.ts";
import { locateJsonError } from "./json_error.ts";

export interface SquadAnswer {
  text: string;
  /** Character offset in the context. */
  start: number;
}

export interface SquadExample {
  id: string;
  title: string;
  question: string;
  context: string;
  /** The given answers (several in dev sets; none for unanswerable v2.0 questions). */
  answers: SquadAnswer[];
  /** v2.0 questions with no answer in the context. */
  isImpossible: boolean;
}

export interface SquadDataset {
  version: string;
  /** v2.0 (has unanswerable questions). */
  v2: boolean;
  examples: SquadExample[];
}

export interface SquadFeature {
  exampleIndex: number;
  /** Which window of its example this is (0, 1, ...). */
  docSpanIndex: number;
  input_ids: number[];
  token_type_ids: number[];
  attention_mask: number[];
  /** For each position, the context characters [charStart, charEnd) it came from; -1 outside the context. */
  charStart: number[];
  charEnd: number[];
  /** For each position, the index of the whitespace-separated context word; -1 outside the context. */
  tokenToWord: number[];
  /** Whether this window gives the position its most central context (BERT's _check_is_max_context). */
  tokenIsMaxContext: boolean[];
  /** Training targets: the answer's first and last positions, 0 and 0 when there is none here. */
  start_position: number;
  end_position: number;
}

export interface SquadFeatureOptions {
  maxSeqLength?: number;
  docStride?: number;
  maxQueryLength?: number;
  /** Make start/end positions from the first answer (BERT's training mode). */
  training?: boolean;
}

export interface SquadFeatures {
  features: SquadFeature[];
  /** Training examples left out because their answer text is not at answer_start in the context. */
  skipped: string[];
}

type Json = Record<string, unknown>;

const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** 1-based line of the first occurrence of `needle` in `text` (for messages), or undefined. */
function lineOf(text: string, needle: string): number | undefined {
  const at = text.indexOf(needle);
  if (at < 0) return undefined;
  let n = 1;
  for (let i = text.indexOf("\n"); i >= 0 && i < at; i = text.indexOf("\n", i + 1)) n++;
  return n;
}

/** Parses SQuAD JSON text; errors name the file, the line (where one can be found) and the JSON path. */
export function parseSquad(text: string, path: string): SquadDataset {
  let j: unknown;
  try {
    j = JSON.parse(text);
  } catch (e) {
    const at = locateJsonError(text);
    if (at) throw new DatasetError(`${path}:${at.line}:${at.column}: invalid JSON: ${at.message}`);
    throw new DatasetError(`${path}: invalid JSON: ${(e as Error).message}`);
  }
  const fail = (where: string, what: string, needle?: string): never => {
    const line = needle === undefined ? undefined : lineOf(text, needle);
    throw new DatasetError(`${path}${line ? `:${line}` : ""}: ${where}: ${what}`);
  };
  if (!isObj(j) || !Array.isArray(j.data)) fail("top level", "not SQuAD JSON (no 'data' array)");
  const root = j as Json;
  const version = typeof root.version === "string" ? root.version : "";
  const examples: SquadExample[] = [];
  let v2 = version.startsWith("v2") || version.startsWith("2");
  (root.data as unknown[]).forEach((article, a) => {
    const at = `data[${a}]`;
    if (!isObj(article) || !Array.isArray(article.paragraphs)) fail(at, "no 'paragraphs' array");
    const title = typeof (article as Json).title === "string" ? (article as Json).title as string : "";
    ((article as Json).paragraphs as unknown[]).forEach((para, p) => {
      const pat = `${at}.paragraphs[${p}]`;
      if (!isObj(para) || typeof para.context !== "string") fail(pat, "no 'context' string");
      if (!Array.isArray((para as Json).qas)) fail(pat, "no 'qas' array");
      const context = (para as Json).context as string;
      ((para as Json).qas as unknown[]).forEach((qa, q) => {
        let where = `${pat}.qas[${q}]`;
        if (!isObj(qa)) return fail(where, "not an object");
        const id = typeof qa.id === "string" || typeof qa.id === "number" ? String(qa.id) : undefined;
        if (id === undefined) return fail(where, "no 'id'");
        where += ` (id ${id})`;
        const needle = JSON.stringify(qa.id);
        if (typeof qa.question !== "string") fail(where, "no 'question' string", needle);
        if (qa.is_impossible !== undefined && typeof qa.is_impossible !== "boolean") {
          fail(where, "'is_impossible' is not true or false", needle);
        }
        const isImpossible = qa.is_impossible === true;
        if (qa.is_impossible !== undefined) v2 = true;
        const rawAnswers = qa.answers ?? [];
        if (!Array.isArray(rawAnswers)) return fail(where, "'answers' is not an array", needle);
        const answers = rawAnswers.map((ans, k) => {
          if (!isObj(ans) || typeof ans.text !== "string") {
            return fail(where, `answers[${k}] has no 'text'`, needle);
          }
          const start = ans.answer_start;
          if (typeof start !== "number" || !Number.isInteger(start) || start < 0) {
            return fail(where, `answers[${k}].answer_start is not a non-negative integer`, needle);
          }
          const end = `answer_start ${start} + ${(ans.text as string).length} characters`;
          if (start + (ans.text as string).length > context.length) {
            return fail(where, `answers[${k}] ends past the context (${end} > ${context.length})`, needle);
          }
          return { text: ans.text as string, start };
        });
        if (isImpossible && answers.length > 0) {
          fail(where, "is_impossible is true but it has answers", needle);
        }
        examples.push({ id, title, question: qa.question as string, context, answers, isImpossible });
      });
    });
  });
  return { version, v2, examples };
}

export async function readSquad(path: string): Promise<SquadDataset> {
  return parseSquad(await readDataFile(path, "SQuAD"), path);
}

/** Whitespace as BERT's SQuAD reader splits context words (it also counts U+202F). */
function isSquadSpace(c: number): boolean {
  return c === 32 || c === 9 || c === 13 || c === 10 || c === 0x202f;
}

/** Index of the whitespace-separated word each character belongs to (-1 for whitespace). */
function charToWord(context: string): Int32Array {
  const out = new Int32Array(context.length).fill(-1);
  let word = -1, inWord = false;
  for (let i = 0; i < context.length; i++) {
    if (isSquadSpace(context.charCodeAt(i))) {
      inWord = false;
    } else {
      if (!inWord) word++;
      inWord = true;
      out[i] = word;
    }
  }
  return out;
}

const collapse = (s: string) => s.trim().split(/\s+/).join(" ");

interface Span {
  start: number;
  length: number;
}

/**
 * BERT's _check_is_max_context: the span where `pos` has the most context on its shorter side wins (the
 * first on a tie). Span starts and ends only grow, so the spans holding `pos` are the run of indexes
 * around `cur`; scanning all of them made a long context quadratic (10 MB: an hour before any output).
 */
function isMaxContext(spans: Span[], cur: number, pos: number): boolean {
  let lo = cur;
  while (lo > 0 && spans[lo - 1].start + spans[lo - 1].length > pos) lo--;
  let best = -1, bestScore = -Infinity;
  for (let i = lo; i < spans.length && spans[i].start <= pos; i++) {
    const s = spans[i], end = s.start + s.length - 1;
    if (pos > end) continue;
    const score = Math.min(pos - s.start, end - pos) + 0.01 * s.length;
    if (score > bestScore) {
      bestScore = score;
      best = i;
    }
  }
  return best === cur;
}

export function squadFeatures(
  examples: SquadExample[],
  tokenizer: BertTokenizer,
  opts: SquadFeatureOptions = {},
): SquadFeatures {
  const { maxSeqLength = 384, docStride = 128, maxQueryLength = 64, training = false } = opts;
  for (const [k, v] of Object.entries({ maxSeqLength, docStride, maxQueryLength })) {
    if (!Number.isInteger(v) || v <= 0) {
      throw new DatasetError(`SQuAD ${k} must be a positive integer, got ${v}`);
    }
  }
  if (maxSeqLength - maxQueryLength - 3 < 1) {
    throw new DatasetError(
      `SQuAD maxSeqLength ${maxSeqLength} leaves no room for the context after a question of up to ` +
        `${maxQueryLength} tokens and 3 special tokens`,
    );
  }
  const { cls, sep, pad } = tokenizer.special;
  const features: SquadFeature[] = [];
  const skipped: string[] = [];
  examples.forEach((ex, exampleIndex) => {
    const query = tokenizer.ids(ex.question).slice(0, maxQueryLength);
    const doc = tokenizer.tokenizeWithOffsets(ex.context);
    const n = doc.ids.length;
    let tokStart = -1, tokEnd = -1;
    if (training && !ex.isImpossible) {
      const ans = ex.answers[0];
      if (ex.answers.length !== 1) {
        throw new DatasetError(
          `SQuAD question ${ex.id}: training needs exactly one answer, it has ${ex.answers.length}`,
        );
      }
      const given = ex.context.slice(ans.start, ans.start + ans.text.length);
      const charEnd = ans.start + ans.text.length;
      // First token reaching into the answer, last token starting inside it.
      for (let i = 0; i < n && tokStart < 0; i++) if (doc.ends[i] > ans.start) tokStart = i;
      for (let i = n - 1; i >= 0 && tokEnd < 0; i--) if (doc.starts[i] < charEnd) tokEnd = i;
      if (collapse(given) !== collapse(ans.text) || tokStart < 0 || tokEnd < tokStart) {
        skipped.push(ex.id);
        return;
      }
    }
    const maxDoc = maxSeqLength - query.length - 3;
    const spans: Span[] = [];
    for (let start = 0; start < n;) {
      const length = Math.min(n - start, maxDoc);
      spans.push({ start, length });
      if (start + length >= n) break;
      start += Math.min(length, docStride);
    }
    const words = charToWord(ex.context);
    spans.forEach((span, docSpanIndex) => {
      const input_ids = [cls, ...query, sep];
      const token_type_ids = new Array<number>(input_ids.length).fill(0);
      const charStart = new Array<number>(input_ids.length).fill(-1);
      const charEnd = charStart.slice();
      const tokenToWord = charStart.slice();
      const tokenIsMaxContext = new Array<boolean>(input_ids.length).fill(false);
      const offset = input_ids.length;
      for (let k = 0; k < span.length; k++) {
        const t = span.start + k;
        input_ids.push(doc.ids[t]);
        token_type_ids.push(1);
        charStart.push(doc.starts[t]);
        charEnd.push(doc.ends[t]);
        tokenToWord.push(words[doc.starts[t]]);
        tokenIsMaxContext.push(isMaxContext(spans, docSpanIndex, t));
      }
      input_ids.push(sep);
      token_type_ids.push(1);
      const attention_mask = new Array<number>(input_ids.length).fill(1);
      for (const a of [charStart, charEnd, tokenToWord]) a.push(-1);
      tokenIsMaxContext.push(false);
      while (input_ids.length < maxSeqLength) {
        input_ids.push(pad);
        token_type_ids.push(0);
        attention_mask.push(0);
        for (const a of [charStart, charEnd, tokenToWord]) a.push(-1);
        tokenIsMaxContext.push(false);
      }
      let start_position = 0, end_position = 0;
      if (tokStart >= 0 && tokStart >= span.start && tokEnd < span.start + span.length) {
        start_position = tokStart - span.start + offset;
        end_position = tokEnd - span.start + offset;
      }
      features.push({
        exampleIndex,
        docSpanIndex,
        input_ids,
        token_type_ids,
        attention_mask,
        charStart,
        charEnd,
        tokenToWord,
        tokenIsMaxContext,
        start_position,
        end_position,
      });
    });
  });
  return { features, skipped };
}
