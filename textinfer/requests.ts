/**
 * Text requests: `{"question","context"}` (extractive QA), `{"text","text_pair"?}` (classification, or
 * fill-mask when the text holds [MASK] and the checkpoint is a pre-training one), each with an optional
 * "id" echoed in the answer and "top_k" for fill-mask. A JSON-lines file of such requests is told apart
 * from the token-id input (model_io/infer_input.ts) by its fields: a token-id row has "input_ids".
 */
import { InputError } from "../model_io/infer_input.ts";

export interface QaRequest {
  kind: "qa";
  id?: string | number;
  question: string;
  context: string;
}

export interface TextRequest {
  kind: "text";
  id?: string | number;
  text: string;
  text_pair?: string;
  top_k?: number;
}

export type InferRequest = QaRequest | TextRequest;

/** A request and where it came from ("file:line" or the flags), for messages. */
export interface Located<T = InferRequest> {
  request: T;
  at: string;
}

const FIELDS = ["id", "question", "context", "text", "text_pair", "top_k"];
/** The most fill-mask guesses a request may ask for per mask. */
export const MAX_TOP_K = 100;

/** One request from a parsed JSON value; `at` names its place in messages. */
export function parseRequest(v: unknown, at: string): InferRequest {
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    throw new InputError(`${at}: expected a JSON object with "question" and "context", or "text"`);
  }
  const o = v as Record<string, unknown>;
  if ("input_ids" in o) {
    throw new InputError(`${at}: a token-id row ("input_ids") among text requests; a file holds one kind`);
  }
  const unknown = Object.keys(o).find((k) => !FIELDS.includes(k));
  if (unknown) {
    throw new InputError(`${at}: unknown field "${unknown}" (expected question+context or text[+text_pair])`);
  }
  const str = (k: string): string | undefined => {
    if (o[k] === undefined) return undefined;
    if (typeof o[k] !== "string") throw new InputError(`${at}: "${k}" must be a string`);
    return o[k] as string;
  };
  const id = o.id;
  if (id !== undefined && typeof id !== "string" && typeof id !== "number") {
    throw new InputError(`${at}: "id" must be a string or a number`);
  }
  const question = str("question"), context = str("context"), text = str("text"), pair = str("text_pair");
  let topK: number | undefined;
  if (o.top_k !== undefined) {
    // Capped: each guess is a line of the answer, so an unbounded top_k let a 1 KB request ask for hundreds
    // of megabytes (every vocabulary entry at every mask).
    if (typeof o.top_k !== "number" || !Number.isInteger(o.top_k) || o.top_k < 1 || o.top_k > MAX_TOP_K) {
      throw new InputError(`${at}: "top_k" must be an integer from 1 to ${MAX_TOP_K}`);
    }
    topK = o.top_k;
  }
  if (question !== undefined || context !== undefined) {
    if (question === undefined || context === undefined) {
      throw new InputError(`${at}: a question needs both "question" and "context"`);
    }
    if (text !== undefined || pair !== undefined || topK !== undefined) {
      throw new InputError(`${at}: "question"/"context" and "text"/"text_pair"/"top_k" do not go together`);
    }
    return { kind: "qa", id: id as string | number | undefined, question, context };
  }
  if (text === undefined) {
    throw new InputError(
      `${at}: expected "question" and "context", or "text" (with an optional "text_pair")`,
    );
  }
  return { kind: "text", id: id as string | number | undefined, text, text_pair: pair, top_k: topK };
}

/** True when the first request line of a JSON-lines file is a token-id row (has "input_ids"). */
export function isTokenIdInput(text: string): boolean {
  const first = text.split("\n").find((l) => l.trim() !== "");
  if (first === undefined) return true; // the token-id reader reports the empty file
  try {
    const v = JSON.parse(first);
    return typeof v === "object" && v !== null && "input_ids" in v;
  } catch {
    return true; // not JSON: the token-id reader (the original format) names the line
  }
}

/** Every request of a JSON-lines file; errors name the file and line. */
export function parseRequests(text: string, file: string): Located[] {
  const out: Located[] = [];
  text.split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    const at = `${file}:${i + 1}`;
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch (e) {
      throw new InputError(`${at}: not valid JSON (${(e as Error).message})`);
    }
    out.push({ request: parseRequest(v, at), at });
  });
  if (out.length === 0) throw new InputError(`${file}: no requests`);
  return out;
}
