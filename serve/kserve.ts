/**
 * The KServe v2 (Open Inference Protocol, as Triton speaks it) JSON shapes for one BERT model: the model
 * metadata, an inference request's `input_ids` / `attention_mask` / `token_type_ids` tensors checked and
 * split into sequences, and the response tensors assembled from each sequence's outputs.
 *
 * Tensors are [N, S] integers (INT32 or INT64), `data` flat in row-major order or nested; only
 * `input_ids` is required (token types default to 0 and the mask to 1, as in Hugging Face). Every
 * sequence keeps its S positions: per-token outputs come back [N, S, ...]. Binary REST bodies
 * (binary.ts) and gRPC requests (grpc.ts) are turned into this JSON shape, so every check is made once.
 */
import type { EncodedRow } from "../model_io/infer_input.ts";
import { asObject, onlyFields } from "./body.ts";
import { badRequest, HttpError } from "./http_error.ts";
import type { RowOutputs, ServedModel } from "./served_model.ts";

export const MODEL_VERSION = "1";
const INPUTS = ["input_ids", "attention_mask", "token_type_ids"] as const;
type InputName = (typeof INPUTS)[number];
const INT_TYPES = ["INT32", "INT64"];

export function modelMetadata(m: ServedModel) {
  return {
    name: m.name,
    versions: [MODEL_VERSION],
    platform: "bertfuse",
    inputs: INPUTS.map((name) => ({ name, datatype: "INT32", shape: [-1, -1] })),
    outputs: m.outputs.map((o) => ({ name: o.name, datatype: "FP32", shape: m.outputShape(o.name) })),
    parameters: {
      head: m.head,
      backend: m.backend.name,
      max_sequence_length: m.maxSeqLen,
      sequence_buckets: m.buckets.join(","),
      max_batch_size: m.maxBatch,
    },
  };
}

/** Triton's minimal model configuration (GET /v2/models/NAME/config): dims leave out the batch axis. */
export function modelConfig(m: ServedModel) {
  const dims = (shape: number[]) => ({ dims: shape.slice(1) });
  return {
    name: m.name,
    platform: "bertfuse",
    max_batch_size: m.maxBatch,
    input: INPUTS.map((name) => ({ name, data_type: "TYPE_INT32", ...dims([-1, -1]) })),
    output: m.outputs.map((o) => ({ name: o.name, data_type: "TYPE_FP32", ...dims(m.outputShape(o.name)) })),
  };
}

export interface ParsedInfer {
  id?: string;
  rows: EncodedRow[];
  /** Requested outputs, in the order asked (all of the head's when the request names none). */
  outputs: { name: string; binary: boolean }[];
}

/** Every element of `data` (flat or nested), or a 400 naming the tensor. */
function flatten(data: unknown, name: string): unknown[] {
  if (!Array.isArray(data)) throw badRequest(`input '${name}': 'data' must be an array`);
  return data.flat(Infinity);
}

function parseTensor(t: unknown, i: number) {
  const o = asObject(t, `inputs[${i}]`);
  onlyFields(o, ["name", "shape", "datatype", "data", "parameters"], `inputs[${i}]`);
  if (typeof o.name !== "string") throw badRequest(`inputs[${i}]: 'name' must be a string`);
  const name = o.name;
  if (!(INPUTS as readonly string[]).includes(name)) {
    throw badRequest(`inputs[${i}]: unknown input '${name}' (expected ${INPUTS.join(", ")})`);
  }
  if (!INT_TYPES.includes(o.datatype as string)) {
    throw badRequest(`input '${name}': datatype must be INT32 or INT64, got ${JSON.stringify(o.datatype)}`);
  }
  const shape = o.shape;
  if (
    !Array.isArray(shape) || shape.length !== 2 ||
    !shape.every((d) => typeof d === "number" && Number.isInteger(d) && d > 0)
  ) {
    throw badRequest(
      `input '${name}': shape must be [N, S] with positive integers, got ${JSON.stringify(shape)}`,
    );
  }
  const data = flatten(o.data, name);
  if (data.length !== shape[0] * shape[1]) {
    throw badRequest(
      `input '${name}': shape [${shape}] needs ${shape[0] * shape[1]} values, got ${data.length}`,
    );
  }
  return { name: name as InputName, shape: shape as [number, number], data };
}

/** Checks one tensor's values lie in [lo, hi) and returns them as numbers. */
function intValues(data: unknown[], name: string, lo: number, hi: number, what: string): number[] {
  data.forEach((x, k) => {
    if (typeof x !== "number" || !Number.isInteger(x)) {
      throw badRequest(`input '${name}': element ${k} is ${JSON.stringify(x)}, not an integer`);
    }
    if (x < lo || x >= hi) {
      throw badRequest(`input '${name}': element ${k} = ${x} is outside ${what} [${lo}, ${hi})`);
    }
  });
  return data as number[];
}

export function parseInferRequest(body: unknown, m: ServedModel, maxRows: number): ParsedInfer {
  const o = asObject(body);
  onlyFields(
    o,
    ["id", "model_name", "model_version", "parameters", "inputs", "outputs"],
    "inference request",
  );
  if (o.id !== undefined && typeof o.id !== "string") throw badRequest("'id' must be a string");
  // The kserve SDK and tritonclient name the model in the body too; only another model is an error.
  if (o.model_name !== undefined && o.model_name !== m.name) {
    throw badRequest(`'model_name' ${JSON.stringify(o.model_name)} is not this URL's model '${m.name}'`);
  }
  if (![undefined, "", MODEL_VERSION].includes(o.model_version as string)) {
    throw badRequest(
      `'model_version' ${JSON.stringify(o.model_version)} is not this model's '${MODEL_VERSION}'`,
    );
  }
  if (!Array.isArray(o.inputs) || o.inputs.length === 0) {
    throw badRequest("'inputs' must be a non-empty array of tensors");
  }
  const tensors = new Map<InputName, ReturnType<typeof parseTensor>>();
  o.inputs.forEach((t, i) => {
    const p = parseTensor(t, i);
    if (tensors.has(p.name)) throw badRequest(`input '${p.name}' appears twice`);
    tensors.set(p.name, p);
  });
  const ids = tensors.get("input_ids");
  if (!ids) throw badRequest("missing input 'input_ids'");
  const [n, s] = ids.shape;
  for (const t of tensors.values()) {
    if (t.shape[0] !== n || t.shape[1] !== s) {
      throw badRequest(`input '${t.name}' has shape [${t.shape}] but input_ids has [${n},${s}]`);
    }
  }
  if (s > m.maxSeqLen) {
    throw badRequest(`sequence length ${s} exceeds this server's maximum of ${m.maxSeqLen} tokens`);
  }
  if (n > maxRows) throw new HttpError(413, `${n} sequences in one request exceed the limit of ${maxRows}`);
  const cfg = m.config;
  const idv = intValues(ids.data, "input_ids", 0, cfg.vocab_size, "the vocabulary");
  const optional = (name: InputName, hi: number, what: string, fill: number) => {
    const t = tensors.get(name);
    return t ? intValues(t.data, name, 0, hi, what) : new Array(n * s).fill(fill);
  };
  const typ = optional("token_type_ids", cfg.type_vocab_size, "the token types", 0);
  const mask = optional("attention_mask", 2, "the mask values", 1);
  const rows: EncodedRow[] = [];
  for (let r = 0; r < n; r++) {
    const at = (a: number[]) => a.slice(r * s, (r + 1) * s);
    rows.push({ input_ids: at(idv), token_type_ids: at(typ), attention_mask: at(mask) });
  }
  // Triton's binary extension: all outputs in binary when the request asks, else those that ask.
  const binary = (asObject(o.parameters ?? {}, "'parameters'")).binary_data_output === true;
  return { id: o.id as string | undefined, rows, outputs: requestedOutputs(o.outputs, m, binary) };
}

function requestedOutputs(v: unknown, m: ServedModel, binary: boolean): ParsedInfer["outputs"] {
  const known = m.outputs.map((o) => o.name);
  if (v === undefined) return known.map((name) => ({ name, binary }));
  if (!Array.isArray(v)) throw badRequest("'outputs' must be an array of {\"name\": ...}");
  return v.map((x, i) => {
    const o = asObject(x, `outputs[${i}]`);
    onlyFields(o, ["name", "parameters"], `outputs[${i}]`);
    if (typeof o.name !== "string" || !known.includes(o.name)) {
      throw badRequest(
        `outputs[${i}]: unknown output ${JSON.stringify(o.name)} (this model has ${known.join(", ")})`,
      );
    }
    const asked = (o.parameters as { binary_data?: unknown } | undefined)?.binary_data;
    return { name: o.name, binary: typeof asked === "boolean" ? asked : binary };
  });
}

/**
 * The response: each requested output as one FP32 tensor over all sequences of the request, its data
 * still a Float32Array, which each protocol writes its own way (JSON numbers, or raw bytes).
 */
export function inferResponse(m: ServedModel, req: ParsedInfer, rows: RowOutputs[]) {
  const outputs = req.outputs.map(({ name, binary }) => {
    const per = rows.map((r) => r.get(name)!);
    // One row's data is its own already (a copy of the batch's); more rows are joined.
    const data = per.length === 1
      ? per[0].data
      : new Float32Array(per.reduce((a, p) => a + p.data.length, 0));
    if (per.length > 1) per.reduce((at, p) => (data.set(p.data, at), at + p.data.length), 0);
    return { name, datatype: "FP32", shape: [rows.length, ...per[0].shape], data, binary };
  });
  return {
    model_name: m.name,
    model_version: MODEL_VERSION,
    ...(req.id !== undefined ? { id: req.id } : {}),
    outputs,
  };
}
