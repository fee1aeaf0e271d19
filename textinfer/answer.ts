/**
 * Answers text requests with a checkpoint: each request is checked against the checkpoint's head and
 * tokenized first (so a bad request fails before anything runs or is printed), then the rows of a group
 * of requests run together and each request gets its answer, in request order.
 */
import { InputError } from "../model_io/infer_input.ts";
import { type ClassifyAnswer, prepareClassify } from "./classify.ts";
import { type FillMaskAnswer, hasMask, prepareFillMask } from "./fill_mask.ts";
import { prepareQa, type QaAnswer, type QaOptions } from "./qa.ts";
import type { InferRequest, Located } from "./requests.ts";
import type { EncodedRow, Head, RowOutput, TextModel } from "./types.ts";

export interface TextInferOptions extends QaOptions {
  /** Fill-mask guesses per mask (default 5); a request's own top_k wins. */
  topK?: number;
}

export type TextAnswer = { id?: string | number } & (QaAnswer | ClassifyAnswer | FillMaskAnswer);

interface Prepared {
  rows: EncodedRow[];
  finish(outputs: Map<string, RowOutput>, firstRow: number): QaAnswer | ClassifyAnswer | FillMaskAnswer;
}

const ARCH: Record<Head, string> = {
  pretraining: "BertForPreTraining",
  classification: "BertForSequenceClassification",
  qa: "BertForQuestionAnswering",
};

function wrongHead(model: TextModel, at: string, what: string, needs: string): never {
  throw new InputError(
    `${at}: ${model.configPath} is a ${ARCH[model.head]} checkpoint; ${what} needs ${needs}`,
  );
}

/** Checks a request against the head and tokenizes it; throws an InputError naming `at`. */
export function prepareRequest(
  model: TextModel,
  r: InferRequest,
  opts: TextInferOptions,
  at: string,
): Prepared {
  const maxSeqLength = opts.maxSeqLength ?? Math.min(512, model.maxPositions);
  if (r.kind === "qa") {
    if (model.head !== "qa") wrongHead(model, at, "a question", "BertForQuestionAnswering");
    return prepareQa(model, r.question, r.context, opts, at);
  }
  if (model.head === "classification") return prepareClassify(model, r.text, r.text_pair, maxSeqLength, at);
  if (model.head === "pretraining") {
    if (r.text_pair !== undefined) wrongHead(model, at, "a text pair", "BertForSequenceClassification");
    if (!hasMask(r.text)) {
      wrongHead(
        model,
        at,
        "a text without [MASK]",
        "BertForSequenceClassification (or [MASK] for fill-mask)",
      );
    }
    return prepareFillMask(model, r.text, r.top_k ?? opts.topK ?? 5, maxSeqLength, at);
  }
  return wrongHead(model, at, "a text", "BertForSequenceClassification, or --question with --context");
}

/** Every request checked and tokenized, ready to run. */
export interface PreparedRequests {
  requests: Located[];
  prepared: Prepared[];
}

/** Checks and tokenizes every request; the first bad one throws (nothing has run). */
export function prepareRequests(
  model: TextModel,
  requests: Located[],
  opts: TextInferOptions = {},
): PreparedRequests {
  return { requests, prepared: requests.map(({ request, at }) => prepareRequest(model, request, opts, at)) };
}

/**
 * Runs prepared requests in groups of `groupSize` (one run of all their rows per group); `onAnswer` sees
 * each answer, in request order, as soon as its group is done.
 */
export async function runPrepared(
  model: TextModel,
  { requests, prepared }: PreparedRequests,
  onAnswer?: (a: TextAnswer, index: number) => void | Promise<void>,
  groupSize = 64,
): Promise<TextAnswer[]> {
  const answers: TextAnswer[] = [];
  for (let g = 0; g < prepared.length; g += groupSize) {
    const group = prepared.slice(g, g + groupSize);
    const outputs = await model.run(group.flatMap((p) => p.rows));
    let first = 0;
    for (const [i, p] of group.entries()) {
      const id = requests[g + i].request.id;
      const a: TextAnswer = { ...(id === undefined ? {} : { id }), ...p.finish(outputs, first) };
      first += p.rows.length;
      answers.push(a);
      await onAnswer?.(a, g + i);
    }
  }
  return answers;
}

/** prepareRequests then runPrepared. */
export function answerRequests(
  model: TextModel,
  requests: Located[],
  opts: TextInferOptions = {},
  onAnswer?: (a: TextAnswer, index: number) => void | Promise<void>,
): Promise<TextAnswer[]> {
  return runPrepared(model, prepareRequests(model, requests, opts), onAnswer);
}

/** Label names from a config's id2label, LABEL_<i> where it has none. */
export function labelsOf(config: { num_labels: number; id2label?: unknown }): string[] {
  const map =
    (typeof config.id2label === "object" && config.id2label !== null ? config.id2label : {}) as Record<
      string,
      unknown
    >;
  return Array.from({ length: config.num_labels }, (_, i) => {
    const l = map[String(i)];
    return typeof l === "string" ? l : `LABEL_${i}`;
  });
}
