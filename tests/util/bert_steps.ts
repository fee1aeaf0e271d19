/**
 * Small BERT training-step graphs the CUDA-shim plan tests share: a one-layer BERT with dropout and two
 * heads of 64 (the flash kernels' head dimension), and the LAMB step of a model at a batch shape.
 */
import { buildModelGraph, type GraphRequest } from "../../optimizer/model_graph.ts";
import { readBertConfig } from "../../models/bert_config.ts";
import type { Precision } from "../../compiler/training_graph/mixed_precision.ts";
import type { Graph } from "../../ir/mod.ts";
import { type BertModel, defineBert } from "../../models/bert.ts";

/** One encoder layer, hidden 128 in two heads of 64, FFN 96, dropout 0.1, a vocabulary of 99. */
export const ONE_LAYER = {
  vocab_size: 99,
  hidden_size: 128,
  num_hidden_layers: 1,
  num_attention_heads: 2,
  intermediate_size: 96,
  hidden_act: "gelu",
  hidden_dropout_prob: 0.1,
  attention_probs_dropout_prob: 0.1,
  max_position_embeddings: 64,
  type_vocab_size: 2,
  initializer_range: 0.02,
  layer_norm_eps: 1e-12,
  num_labels: 2,
};
export const oneLayerBert = (name: string): BertModel => defineBert(name, ONE_LAYER);

/** A pretraining step with LAMB: batch, sequence, masked predictions; dynamic loss scaling on request. */
export function lambStep(
  model: BertModel,
  precision: "fp32" | "fp16",
  [batchSize, seqLen, maxPredictions]: readonly [number, number, number],
  dynamicScale: boolean,
): Graph {
  return buildModelGraph({
    model,
    mode: "train",
    precision,
    batchSize,
    seqLen,
    maxPredictions,
    optimizer: { kind: "lamb", dynamicScale },
  });
}

const FIXTURE = new URL("../fixtures/hf-tiny/pretraining/config.json", import.meta.url).pathname;
/** The config of the Hugging Face tiny-BERT fixture (tests/fixtures/hf-tiny/pretraining). */
export const FIXTURE_CONFIG = readBertConfig(FIXTURE);

/** A pretraining step of the fixture model at [batch, sequence, predictions]; LAMB unless `optimizer` says. */
export const fixtureStep = (
  precision: Precision,
  [batchSize, seqLen, maxPredictions]: readonly [number, number, number],
  optimizer?: GraphRequest["optimizer"],
): Graph =>
  buildModelGraph({
    ...{ model: defineBert("tiny-fixture", FIXTURE_CONFIG), mode: "train", precision, optimizer },
    ...{ batchSize, seqLen, maxPredictions },
  });
