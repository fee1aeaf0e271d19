/**
 * Inference from raw text (question answering, classification, fill-mask) for `deno task infer`, the
 * server and the browser page. Give it a TextModel (tokenizer, head, limits and a runner over encoded
 * rows) and requests; it returns JSON-ready answers. Only load.ts and
 * checkpoint.ts touch the file system.
 */
export {
  answerRequests,
  labelsOf,
  type PreparedRequests,
  prepareRequest,
  prepareRequests,
  runPrepared,
  type TextAnswer,
  type TextInferOptions,
} from "./answer.ts";
export { type ClassifyAnswer, softmax } from "./classify.ts";
export { type FillMaskAnswer, hasMask, MASK_TEXT, type MaskGuess, topK } from "./fill_mask.ts";
export { type QaAnswer, type QaOptions, type QaSpan } from "./qa.ts";
export {
  type InferRequest,
  isTokenIdInput,
  type Located,
  parseRequest,
  parseRequests,
  type QaRequest,
  type TextRequest,
} from "./requests.ts";
export { type NamedText, type TokenizerFiles, tokenizerFromFiles } from "./tokenizer.ts";
export type { EncodedRow, Head, ModelRunner, RowOutput, TextModel } from "./types.ts";
