/**
 * One checkpoint held by the server: its config and head, the inference graph for every compiled shape,
 * the weights and the backend that runs them. `run` takes the sequences of one batch (all in one bucket)
 * and returns each sequence's outputs, through runtime/infer.ts's batch driver.
 */
import { defineBert, type Head, headOf, INFER_OUTPUTS } from "../models/bert.ts";
import { type BertConfig, readBertConfig } from "../models/bert_config.ts";
import type { Graph } from "../ir/mod.ts";
import { loadHfWeights } from "../model_io/hf_checkpoint.ts";
import type { EncodedRow } from "../model_io/infer_input.ts";
import type { Backend } from "../runtime/backend.ts";
import { type OutputSpec, runInference } from "../runtime/infer.ts";
import { batchSizes, defaultBuckets, smallestFit } from "./shapes.ts";

/** One output of one sequence: per-token outputs are [len, ...], the others [...] (no batch axis). */
export interface RowOutput {
  shape: number[];
  data: Float32Array;
}
export type RowOutputs = Map<string, RowOutput>;

export interface ServedModelOptions {
  name: string;
  /** The backend, or how to open it: opened after the checkpoint reads, so a bad folder fails first. */
  backend: Backend | (() => Promise<Backend>);
  head?: Head;
  /** The largest batch the batcher forms; batch shapes are the powers of two up to it. */
  maxBatch: number;
  /** Longest sequence accepted (default: the config's max_position_embeddings). */
  maxSeqLen?: number;
  /** Sequence-length buckets (default: powers of two from 16, and maxSeqLen). */
  buckets?: number[];
}

export class ServedModel {
  readonly outputs: readonly OutputSpec[];
  readonly buckets: readonly number[];
  readonly batchSizes: readonly number[];
  readonly maxSeqLen: number;
  private graphs = new Map<string, Graph>();
  private warmed = new Set<string>();

  private constructor(
    readonly name: string,
    readonly dir: string,
    readonly config: BertConfig,
    readonly head: Head,
    readonly backend: Backend,
    private model: ReturnType<typeof defineBert>,
    private weights: Map<string, Float32Array>,
    opts: ServedModelOptions,
  ) {
    this.outputs = INFER_OUTPUTS[head];
    this.maxSeqLen = Math.min(
      opts.maxSeqLen ?? config.max_position_embeddings,
      config.max_position_embeddings,
    );
    this.buckets = (opts.buckets ?? defaultBuckets(this.maxSeqLen)).filter((b) => b <= this.maxSeqLen);
    if (this.buckets.at(-1) !== this.maxSeqLen) this.buckets = [...this.buckets, this.maxSeqLen];
    this.batchSizes = batchSizes(opts.maxBatch);
  }

  /** Reads config.json and model.safetensors (ConfigError / CheckpointError name the file). */
  static async load(dir: string, opts: ServedModelOptions): Promise<ServedModel> {
    const clean = dir.replace(/\/$/, "");
    const config = readBertConfig(`${clean}/config.json`);
    const head = opts.head ?? headOf(config);
    const model = defineBert(clean, config);
    const weights = await loadHfWeights(model.build({ head, mode: "infer", batchSize: 1, seqLen: 1 }), clean);
    const backend = typeof opts.backend === "function" ? await opts.backend() : opts.backend;
    return new ServedModel(opts.name, clean, config, head, backend, model, weights, opts);
  }

  /** The bucket a sequence of `len` tokens runs in, or undefined when it is longer than maxSeqLen. */
  bucketFor(len: number): number | undefined {
    return smallestFit(len, this.buckets);
  }

  get maxBatch(): number {
    return this.batchSizes.at(-1)!;
  }

  /** An output's shape for the metadata: -1 for the batch axis and, per token, the sequence axis. */
  outputShape(name: string): number[] {
    const g = this.graph(1, this.buckets[0]);
    const shape = g.node(g.outputs.get(name)!).type.shape;
    const perToken = this.outputs.find((o) => o.name === name)!.perToken;
    return [-1, ...(perToken ? [-1] : []), ...shape.slice(perToken ? 2 : 1)];
  }

  private graph(b: number, s: number): Graph {
    const key = `${b}x${s}`;
    let g = this.graphs.get(key);
    if (!g) {
      g = this.model.build({ head: this.head, mode: "infer", batchSize: b, seqLen: s });
      this.graphs.set(key, g);
    }
    return g;
  }

  /**
   * Builds, compiles and runs each (batch size, bucket) once, so no request pays for a compile: the first
   * `limit` shapes not yet warmed. `onShape` hears of each: its shape and how many of all are warm.
   */
  async warm(onShape?: (batch: number, bucket: number, done: number, of: number) => void, limit = Infinity) {
    const all = this.buckets.flatMap((s) => this.batchSizes.map((b) => [b, s]));
    for (const [b, s] of all.filter(([b, s]) => !this.warmed.has(`${b}x${s}`)).slice(0, limit)) {
      await this.runShape(Array.from({ length: b }, () => paddingRow(s)), b);
      this.warmed.add(`${b}x${s}`);
      onShape?.(b, s, this.warmed.size, all.length);
    }
  }

  /**
   * Runs the sequences of one batch. Each is padded to `bucket` (id 0, type 0, mask 0) and the batch to
   * the next compiled batch size with all-padding rows; each sequence gets back its own positions only.
   */
  async run(rows: readonly EncodedRow[], bucket: number): Promise<RowOutputs[]> {
    const b = smallestFit(rows.length, this.batchSizes);
    if (b === undefined || !this.buckets.includes(bucket)) {
      throw new Error(`no compiled shape for ${rows.length} rows in bucket ${bucket}`);
    }
    const padded = rows.map((r) => padRow(r, bucket));
    while (padded.length < b) padded.push(paddingRow(bucket));
    const results = await this.runShape(padded, b);
    return rows.map((r, i) => {
      const out: RowOutputs = new Map();
      for (const spec of this.outputs) {
        const res = results.get(spec.name)!;
        const inner = res.shape.slice(spec.perToken ? 2 : 1);
        const innerSize = inner.reduce((a, x) => a * x, 1);
        const rowStride = (spec.perToken ? bucket : 1) * innerSize;
        const len = spec.perToken ? r.input_ids.length * innerSize : innerSize;
        out.set(spec.name, {
          shape: spec.perToken ? [r.input_ids.length, ...inner] : inner,
          data: res.data.slice(i * rowStride, i * rowStride + len),
        });
      }
      return out;
    });
  }

  /** `rows` are exactly b rows of one bucket's length, so runInference runs one batch of one graph. */
  private runShape(rows: EncodedRow[], b: number) {
    return runInference(rows, {
      batchSize: b,
      outputs: this.outputs,
      graphFor: (bb, ss) => this.graph(bb, ss),
      backend: this.backend,
      weights: this.weights,
    });
  }
}

function padRow(r: EncodedRow, len: number): EncodedRow {
  const pad = (a: number[]) => a.length === len ? a : [...a, ...new Array(len - a.length).fill(0)];
  return {
    input_ids: pad(r.input_ids),
    token_type_ids: pad(r.token_type_ids),
    attention_mask: pad(r.attention_mask),
  };
}

/**
 * A row that fills a batch up to its compiled size: one attended token, so attention has a key to look at
 * (a row with every key masked would still be finite, but one real key keeps it ordinary).
 */
function paddingRow(len: number): EncodedRow {
  const zeros = new Array(len).fill(0);
  const mask = [...zeros];
  mask[0] = 1;
  return { input_ids: zeros, token_type_ids: [...zeros], attention_mask: mask };
}
