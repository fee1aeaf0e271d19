/**
 * Extractive question answering from text, as NVIDIA's inference.py: the question and the context become
 * `[CLS] question [SEP] window [SEP]` features with doc stride over long contexts (data/finetune/squad.ts),
 * the start/end logits of every window are post-processed into the n best answers with softmax
 * probabilities (data/finetune/squad_post.ts), and the best one is returned with its character span in the
 * context. A question that alone leaves no room for the context is an error, not a silent truncation.
 */
import { type SquadFeature, squadFeatures } from "../data/finetune/squad.ts";
import { squadPredictions } from "../data/finetune/squad_post.ts";
import { InputError } from "../model_io/infer_input.ts";
import type { EncodedRow, RowOutput, TextModel } from "./types.ts";

export interface QaOptions {
  /** Tokens per window, special tokens included (default: min(384, the model's positions)). */
  maxSeqLength?: number;
  /** Tokens between window starts (default: min(128, a third of maxSeqLength)). */
  docStride?: number;
  /** Longest question in tokens (default: min(64, maxSeqLength - 4)); a longer one is an error. */
  maxQueryLength?: number;
  /** Answers considered and reported (default 20, as NVIDIA). */
  nBestSize?: number;
  /** Longest answer in tokens (default 30). */
  maxAnswerLength?: number;
}

export interface QaSpan {
  text: string;
  /** Characters [start, end) of the context. */
  start: number;
  end: number;
  /** Softmax probability among the n best. */
  score: number;
}

export interface QaAnswer {
  answer: string;
  start: number;
  end: number;
  score: number;
  /** Windows the context was split into. */
  windows: number;
  nbest: QaSpan[];
}

export interface PreparedQa {
  rows: EncodedRow[];
  finish(outputs: Map<string, RowOutput>, firstRow: number): QaAnswer;
}

/**
 * The longest context answered: 1,000,000 characters is about 11,000 windows, seconds on BERT-tiny and
 * 250 MB of features; ten times that held 2 GB and 25 MB exhausted the JavaScript heap (the server's cap,
 * 100,000, is lower: tokenizing blocks its event loop).
 */
export const MAX_CONTEXT_CHARS = 1_000_000;

export function qaLimits(model: TextModel, opts: QaOptions) {
  const maxSeqLength = opts.maxSeqLength ?? Math.min(384, model.maxPositions);
  return {
    maxSeqLength,
    docStride: opts.docStride ?? Math.min(128, Math.max(1, Math.floor(maxSeqLength / 3))),
    maxQueryLength: opts.maxQueryLength ?? Math.min(64, maxSeqLength - 4),
    nBestSize: opts.nBestSize ?? 20,
    maxAnswerLength: opts.maxAnswerLength ?? 30,
  };
}

/** Tokenizes and windows one question; `at` names the request in errors. Nothing runs yet. */
export function prepareQa(
  model: TextModel,
  question: string,
  context: string,
  opts: QaOptions,
  at: string,
): PreparedQa {
  const lim = qaLimits(model, opts);
  if (lim.maxSeqLength > model.maxPositions) {
    throw new InputError(
      `${at}: --max-seq-length ${lim.maxSeqLength} is more than the model's ${model.maxPositions} positions`,
    );
  }
  if (context.length > MAX_CONTEXT_CHARS) {
    const over = `${context.length} characters, more than ${MAX_CONTEXT_CHARS}`;
    throw new InputError(`${at}: the context has ${over}; ask about a part of it`);
  }
  const tok = model.tokenizer;
  const qLen = tok.ids(question).length;
  if (qLen === 0) throw new InputError(`${at}: the question is empty`);
  if (tok.ids(context).length === 0) throw new InputError(`${at}: the context is empty`);
  if (qLen + 4 > lim.maxSeqLength) {
    throw new InputError(
      `${at}: the question has ${qLen} tokens; with [CLS] and two [SEP] it leaves no room for the context ` +
        `in ${lim.maxSeqLength} positions`,
    );
  }
  if (qLen > lim.maxQueryLength) {
    throw new InputError(
      `${at}: the question has ${qLen} tokens, more than --max-query-length ${lim.maxQueryLength}`,
    );
  }
  const example = { id: "q", title: "", question, context, answers: [], isImpossible: false };
  const { features } = squadFeatures([example], tok, {
    maxSeqLength: lim.maxSeqLength,
    docStride: lim.docStride,
    maxQueryLength: lim.maxQueryLength,
  });
  // Windows are padded to maxSeqLength; the runner pads each batch itself, so run only the real tokens.
  const trimmed = features.map((f) => trimFeature(f));
  return {
    rows: trimmed.map((f) => ({
      input_ids: f.input_ids,
      token_type_ids: f.token_type_ids,
      attention_mask: f.attention_mask,
    })),
    finish(outputs, firstRow) {
      const results = trimmed.map((f, i) => ({
        start_logits: rowOf(outputs.get("start_logits")!, firstRow + i, f.input_ids.length),
        end_logits: rowOf(outputs.get("end_logits")!, firstRow + i, f.input_ids.length),
      }));
      const [pred] = squadPredictions([example], trimmed, results, {
        nBest: lim.nBestSize,
        maxAnswerLength: lim.maxAnswerLength,
      });
      const nbest = pred.nbest.map((e) => ({
        text: e.text,
        start: e.start,
        end: e.end,
        score: e.probability,
      }));
      const best = nbest[0];
      return {
        answer: best.text,
        start: best.start,
        end: best.end,
        score: best.score,
        windows: trimmed.length,
        nbest,
      };
    },
  };
}

function trimFeature(f: SquadFeature): SquadFeature {
  const n = f.attention_mask.lastIndexOf(1) + 1;
  return {
    ...f,
    input_ids: f.input_ids.slice(0, n),
    token_type_ids: f.token_type_ids.slice(0, n),
    attention_mask: f.attention_mask.slice(0, n),
    charStart: f.charStart.slice(0, n),
    charEnd: f.charEnd.slice(0, n),
    tokenToWord: f.tokenToWord.slice(0, n),
    tokenIsMaxContext: f.tokenIsMaxContext.slice(0, n),
  };
}

/** Row `r`'s first `len` values of a per-token output [N, S]. */
export function rowOf(out: RowOutput, r: number, len: number): Float32Array {
  const s = out.shape[1];
  return out.data.subarray(r * s, r * s + len);
}
