/**
 * One BERT encoder layer as a graph of its own (forward, or forward plus backward of a probe loss), for
 * kernel-count tests and fused-vs-reference numerics on a realistic fusion mix.
 */
import { decomposeComposites } from "../compiler/passes/decompose.ts";
import { differentiate } from "../compiler/training_graph/autodiff.ts";
import { ModelBuilder } from "../dsl/mod.ts";
import type { Graph } from "../ir/mod.ts";
import type { BertConfig } from "../models/bert_config.ts";
import { bertEncoderLayer, MASK_VALUE } from "../models/bert.ts";
import tiny from "../models/bert-tiny.ts";

export interface LayerGraphOptions {
  batch: number;
  seq: number;
  /** Dropout on (adds the `rng_key` input). */
  dropout: boolean;
  /** Append the backward pass of loss = sum(hidden_out * probe). */
  backward: boolean;
  config?: Partial<BertConfig>;
}

/** The layer with its composites decomposed, as the compile's first pass leaves it for the kernel stages. */
export function layerGraph(o: LayerGraphOptions): Graph {
  const cfg: BertConfig = { ...tiny.config, ...o.config };
  const H = cfg.hidden_size;
  const m = new ModelBuilder("layer", { trackLocations: true });
  const hidden = m.input("hidden", "f32", [o.batch, o.seq, H]);
  const mask = m.input("attention_mask", "i32", [o.batch, o.seq]);
  const key = o.dropout ? m.input("rng_key", "u32", [2]) : undefined;
  const additive = mask.cast("f32").sub(1).mul(-MASK_VALUE).reshape([o.batch, 1, 1, o.seq]);
  const out = bertEncoderLayer(m, cfg, "layer", hidden, additive, key);
  if (!o.backward) {
    m.output("hidden_out", out);
    return decomposeComposites(m.graph);
  }
  const probe = m.input("probe", "f32", [o.batch, o.seq, H]);
  m.output("hidden_out", out);
  m.output("loss", out.mul(probe).sum([0, 1, 2], false));
  return decomposeComposites(differentiate(m.graph, "loss"));
}
