/**
 * The text endpoints, on textinfer/ (the code `deno task infer` answers text with), so an answer here
 * is the one `deno task infer --question/--text` prints for the same input and options:
 *
 *   POST /v1/qa         {"question", "context"}        question answering checkpoints
 *   POST /v1/classify   {"text", "text_pair"?}         sequence classification checkpoints
 *   POST /v1/fill-mask  {"text", "top_k"?}             pre-training checkpoints (text with [MASK])
 *
 * each with an optional "id" echoed back. The sequences a request tokenizes into (one, or a window per
 * doc-stride span of a long context) go through the same batcher as KServe requests. An endpoint the
 * checkpoint's head cannot answer is 404 with the reason.
 */
import { TokenizerError } from "../data/tokenizer/mod.ts";
import { InputError } from "../model_io/infer_input.ts";
import type { Head } from "../models/bert.ts";
import { openTextModel } from "../textinfer/checkpoint.ts";
import {
  hasMask,
  type InferRequest,
  parseRequest,
  prepareRequest,
  type RowOutput,
  type TextInferOptions,
  type TextModel,
} from "../textinfer/mod.ts";
import { asObject, onlyFields } from "./body.ts";
import { HttpError } from "./http_error.ts";
import type { Route } from "./router.ts";
import type { RouteContext } from "./server.ts";
import type { RowOutputs } from "./served_model.ts";

interface TextEndpoint {
  path: string;
  endpoint: string;
  head: Head;
  fields: string[];
}

const ENDPOINTS: TextEndpoint[] = [
  { path: "/v1/qa", endpoint: "qa", head: "qa", fields: ["id", "question", "context"] },
  { path: "/v1/classify", endpoint: "classify", head: "classification", fields: ["id", "text", "text_pair"] },
  { path: "/v1/fill-mask", endpoint: "fill_mask", head: "pretraining", fields: ["id", "text", "top_k"] },
];

const ARCH: Record<Head, string> = {
  qa: "BertForQuestionAnswering",
  classification: "BertForSequenceClassification",
  pretraining: "BertForPreTraining",
};

/**
 * Each sequence's outputs stacked the way runtime/infer.ts returns a batch: [N, ...], or [N, S, ...]
 * per token with S the longest sequence and zeros past each one's own length.
 */
export function stackRows(rows: RowOutputs[], perToken: Map<string, boolean>): Map<string, RowOutput> {
  const out = new Map<string, RowOutput>();
  for (const [name, tokenwise] of perToken) {
    const per = rows.map((r) => r.get(name)!);
    if (!tokenwise) {
      const inner = per[0].shape;
      const size = per[0].data.length;
      const data = new Float32Array(rows.length * size);
      per.forEach((p, i) => data.set(p.data, i * size));
      out.set(name, { shape: [rows.length, ...inner], data });
      continue;
    }
    const s = Math.max(...per.map((p) => p.shape[0]));
    const inner = per[0].shape.slice(1);
    const step = inner.reduce((a, x) => a * x, 1);
    const data = new Float32Array(rows.length * s * step);
    per.forEach((p, i) => data.set(p.data, i * s * step));
    out.set(name, { shape: [rows.length, s, ...inner], data });
  }
  return out;
}

/** The longest text field a request may send (about 16,000 words; `deno task infer` takes any length). */
export const MAX_TEXT_CHARS = 100_000;

/** The text routes for a checkpoint folder; none when it has no tokenizer files (said in `log`). */
export async function textRoutes(
  ctx: RouteContext,
  opts: TextInferOptions,
  log: (line: string) => void,
): Promise<Route[]> {
  const { model } = ctx;
  const perToken = new Map(model.outputs.map((o) => [o.name, o.perToken]));
  let text: TextModel | undefined;
  try {
    text = await openTextModel(
      model.dir,
      model.config,
      model.head,
      async (rows) => stackRows(await ctx.runRows(rows), perToken),
    );
  } catch (e) {
    if (!(e instanceof TokenizerError)) throw e;
    log(`text endpoints off: ${e.message}`);
  }
  return ENDPOINTS.map((ep): Route => ({
    method: "POST",
    path: new RegExp(`^${ep.path}$`),
    endpoint: ep.endpoint,
    timed: true,
    handler: async (req) => {
      if (!text) {
        throw new HttpError(
          404,
          `${ep.path}: this checkpoint has no tokenizer (vocab.txt or tokenizer.json)`,
        );
      }
      if (model.head !== ep.head) {
        throw new HttpError(
          404,
          `${ep.path} needs a ${ARCH[ep.head]} checkpoint; this one is ${ARCH[model.head]}`,
        );
      }
      const body = asObject(await ctx.readBody(req));
      onlyFields(body, ep.fields, ep.path);
      // Tokenizing runs on the event loop: a 900 KB context blocked every client for 14.6 s.
      for (const f of ["question", "context", "text", "text_pair"]) {
        const v = body[f];
        if (typeof v === "string" && v.length > MAX_TEXT_CHARS) {
          throw new HttpError(413, `${ep.path}: "${f}" has ${v.length} characters, over ${MAX_TEXT_CHARS}`);
        }
      }
      try {
        const request: InferRequest = parseRequest(body, "request");
        if (ep.head === "pretraining" && !hasMask((request as { text: string }).text)) {
          throw new InputError(`request: fill-mask needs [MASK] in the text`);
        }
        const prepared = prepareRequest(text, request, opts, "request");
        const outputs = await text.run(prepared.rows);
        return { ...(request.id === undefined ? {} : { id: request.id }), ...prepared.finish(outputs, 0) };
      } catch (e) {
        if (e instanceof InputError || e instanceof TokenizerError) throw new HttpError(400, e.message);
        throw e;
      }
    },
  }));
}
