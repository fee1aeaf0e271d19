/**
 * What text inference needs from the rest of bertfuse, as plain data and one function, so that the same
 * code runs under `deno task infer`, the HTTP server and a browser bundle: the tokenizer, the checkpoint's
 * head and limits, and a runner that turns encoded rows into the head's outputs (the caller decides the
 * backend; nothing here imports the compiler or the runtime).
 */
import type { Head } from "../models/bert.ts";
import type { BertTokenizer } from "../data/tokenizer/mod.ts";
import type { EncodedRow } from "../model_io/infer_input.ts";

export type { EncodedRow, Head };

/** One output over all rows: [N, ...], or [N, S, ...] for per-token outputs with S the longest row. */
export interface RowOutput {
  shape: number[];
  data: Float32Array;
}

export type ModelRunner = (rows: EncodedRow[]) => Promise<Map<string, RowOutput>>;

export interface TextModel {
  head: Head;
  tokenizer: BertTokenizer;
  /** Positions the model can see (config max_position_embeddings). */
  maxPositions: number;
  /** Classification: the label of each output (config id2label), LABEL_<i> where it has none. */
  labels: string[];
  /** The config file, named in errors about the checkpoint. */
  configPath: string;
  run: ModelRunner;
}
