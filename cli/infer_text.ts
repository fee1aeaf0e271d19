/** `deno task infer`'s text flags: their spec, their help, and the requests and options they make. */
import type { Located, TextInferOptions } from "../textinfer/mod.ts";
import { hasMask } from "../textinfer/mod.ts";
import { positiveInt, stringFlags, UsageError } from "./common.ts";

export const TEXT_FLAGS = stringFlags(
  "question context text text-pair top-k n-best-size max-answer-length max-seq-length doc-stride max-query-length",
);

export const TEXT_HELP = `
Text input (the tokenizer is read from the checkpoint folder: vocab.txt and tokenizer_config.json, or
tokenizer.json); one JSON object per request on stdout, nothing written to --output:
  --question Q --context C   question answering (a BertForQuestionAnswering checkpoint): the answer, its
                             characters [start, end) in the context, its score and the n best
  --text T [--text-pair U]   classification (BertForSequenceClassification): label and probabilities, or
                             the value of a one-output (regression) head; on a pre-training checkpoint a
                             text with [MASK] is fill-mask: the top-k tokens per mask
  --input FILE.jsonl         requests, one a line: {"question","context"} or {"text","text_pair"?,
                             "top_k"?}, each with an optional "id" echoed back (a file whose first line has
                             "input_ids" is token-id input, above)
  --top-k N                  fill-mask guesses per mask (default 5)
  --n-best-size N            answers considered and listed (default 20)
  --max-answer-length N      longest answer in tokens (default 30)
  --max-seq-length N         tokens per window (default: min(384, max_position_embeddings) for QA,
                             max_position_embeddings otherwise); longer classification texts are
                             truncated (longest first) and say so
  --doc-stride N             QA: tokens between the starts of a long context's windows
                             (default: min(128, max-seq-length / 3))
  --max-query-length N       QA: longest question in tokens (default: min(64, max-seq-length - 4))
With text input and no --checkpoint, the built-in tiny random checkpoint of the request's kind is used
(tests/fixtures/hf-tiny/qa, classification or pretraining): the answers show the format, not knowledge.
`;

type TextValues = { [K in keyof typeof TEXT_FLAGS]?: string };

/** The requests the flags ask for; undefined when no text flag is given. */
export function requestsFromFlags(v: TextValues): Located[] | undefined {
  const at = "command line";
  if (v.question !== undefined || v.context !== undefined) {
    if (v.question === undefined || v.context === undefined) {
      throw new UsageError("--question and --context go together");
    }
    if (v.text !== undefined || v["text-pair"] !== undefined) {
      throw new UsageError("--question/--context and --text/--text-pair do not go together");
    }
    return [{ request: { kind: "qa", question: v.question, context: v.context }, at }];
  }
  if (v["text-pair"] !== undefined && v.text === undefined) throw new UsageError("--text-pair needs --text");
  if (v.text === undefined) return undefined;
  return [{ request: { kind: "text", text: v.text, text_pair: v["text-pair"] }, at }];
}

export function textOptions(v: TextValues): TextInferOptions {
  const n = (flag: keyof typeof TEXT_FLAGS) =>
    v[flag] === undefined ? undefined : positiveInt(flag, v[flag], 0);
  return {
    topK: n("top-k"),
    nBestSize: n("n-best-size"),
    maxAnswerLength: n("max-answer-length"),
    maxSeqLength: n("max-seq-length"),
    docStride: n("doc-stride"),
    maxQueryLength: n("max-query-length"),
  };
}

/** The built-in tiny checkpoint folder (under `fixtures`) for the first request's kind. */
export function tinyCheckpointFor(requests: Located[], fixtures: string): string {
  const r = requests[0].request;
  const kind = r.kind === "qa" ? "qa" : hasMask(r.text) ? "pretraining" : "classification";
  return `${fixtures}/${kind}`;
}
