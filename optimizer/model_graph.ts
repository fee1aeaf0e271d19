/** The graph a compile starts from: one training step (forward, backward, optimizer) or inference. */
import type { Graph } from "../ir/mod.ts";
import type { BertModel, Head } from "../models/bert.ts";
import { flatLayoutOf } from "./flat_layout.ts";
import { appendOptimizer, appendScaledLoss, type OptimizerOptions } from "./update.ts";
import { differentiate } from "../compiler/training_graph/autodiff.ts";
import { applyPrecision, type Precision } from "../compiler/training_graph/mixed_precision.ts";
import { appendSgdUpdate } from "./sgd_update.ts";

export interface GraphRequest {
  readonly model: BertModel;
  readonly mode: "train" | "infer";
  readonly head?: Head;
  readonly precision: Precision;
  readonly batchSize: number;
  readonly seqLen: number;
  readonly maxPredictions?: number;
  readonly dropout?: boolean;
  /**
   * Training: the fused optimizer (default LAMB; dynamic loss scaling when the precision is fp16), or
   * "sgd" — a plain `new:<param>` update with a `learning_rate` input, for tests of the step itself.
   */
  readonly optimizer?: OptimizerOptions | "sgd";
}

/** The graph of one training step (forward, backward, optimizer update) or of inference. */
export function buildModelGraph(req: GraphRequest): Graph {
  const train = req.mode === "train";
  let g = req.model.build({
    head: req.head ?? "pretraining",
    mode: req.mode,
    batchSize: req.batchSize,
    seqLen: req.seqLen,
    maxPredictions: req.maxPredictions ?? Math.max(1, Math.round(req.seqLen * 0.15)),
    dropout: req.dropout,
    trackLocations: true,
  });
  if (train) {
    const opt = req.optimizer ?? { kind: "lamb", dynamicScale: req.precision === "fp16" };
    if (opt === "sgd") g = appendSgdUpdate(differentiate(g, "loss"));
    else g = appendOptimizer(differentiate(g, appendScaledLoss(g)), flatLayoutOf(g), opt);
  }
  return applyPrecision(g, req.precision);
}
