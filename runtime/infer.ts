/**
 * Batched inference: groups rows into batches, pads each batch to its longest row (input id 0, token
 * type 0, attention mask 0), runs one graph per distinct batch shape, and assembles the outputs over all
 * rows. Per-token outputs are [N, S, ...] with S the longest row overall; positions at or past a row's own
 * length are padding and are written as 0, so results do not depend on how rows were batched.
 */
import { type Graph, numel } from "../ir/mod.ts";
import type { Backend } from "./backend.ts";
import type { EncodedRow } from "../model_io/infer_input.ts";

export interface OutputSpec {
  name: string;
  perToken: boolean;
}

export interface InferResult {
  shape: number[];
  data: Float32Array;
}

export interface InferOptions {
  batchSize: number;
  outputs: readonly OutputSpec[];
  /** Builds (or fetches from a cache) the inference graph for a batch shape. */
  graphFor: (batch: number, seqLen: number) => Graph;
  backend: Backend;
  weights: Map<string, ArrayLike<number>>;
  onBatch?: (done: number, total: number) => void;
}

export async function runInference(
  rows: EncodedRow[],
  opts: InferOptions,
): Promise<Map<string, InferResult>> {
  const n = rows.length;
  const maxLen = Math.max(...rows.map((r) => r.input_ids.length));
  const results = new Map<string, InferResult>();
  const feeds: Record<string, ArrayLike<number>> = Object.fromEntries(opts.weights);
  for (let start = 0; start < n; start += opts.batchSize) {
    const batch = rows.slice(start, start + opts.batchSize);
    const b = batch.length, s = Math.max(...batch.map((r) => r.input_ids.length));
    for (const field of ["input_ids", "token_type_ids", "attention_mask"] as const) {
      const buf = new Int32Array(b * s);
      batch.forEach((r, i) => buf.set(r[field], i * s));
      feeds[field] = buf;
    }
    const g = opts.graphFor(b, s);
    const out = await opts.backend.run(g, feeds, opts.outputs.map((o) => o.name));
    for (const spec of opts.outputs) {
      const v = out.get(spec.name)!;
      const shape = g.node(g.outputs.get(spec.name)!).type.shape;
      const inner = numel(shape.slice(spec.perToken ? 2 : 1));
      let res = results.get(spec.name);
      if (!res) {
        const full = [n, ...(spec.perToken ? [maxLen] : []), ...shape.slice(spec.perToken ? 2 : 1)];
        res = { shape: full, data: new Float32Array(numel(full)) };
        results.set(spec.name, res);
      }
      batch.forEach((r, i) => {
        const row = start + i;
        if (!spec.perToken) {
          res.data.set(v.subarray(i * inner, (i + 1) * inner), row * inner);
          return;
        }
        // Only the row's own tokens; the rest of its [maxLen] stretch stays 0.
        const len = r.input_ids.length;
        res.data.set(v.subarray(i * s * inner, (i * s + len) * inner), row * maxLen * inner);
      });
    }
    opts.onBatch?.(Math.min(start + b, n), n);
  }
  return results;
}
