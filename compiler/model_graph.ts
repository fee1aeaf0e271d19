/** The graph a compile starts from: one training step (forward, backward, SGD update) or inference. */
import type { Graph } from "../ir/mod.ts";
import type { BertModel, Head } from "../models/bert.ts";
import { differentiate } from "./passes/autodiff.ts";
import { applyPrecision, type Precision } from "./passes/precision.ts";
import { appendSgdUpdate } from "./passes/sgd_update.ts";

export interface GraphRequest {
  readonly model: BertModel;
  readonly mode: "train" | "infer";
  readonly head?: Head;
  readonly precision: Precision;
  readonly batchSize: number;
  readonly seqLen: number;
  readonly maxPredictions?: number;
  readonly dropout?: boolean;
}

/** The graph of one training step (forward, backward, SGD update) or of inference. */
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
  if (train) g = appendSgdUpdate(differentiate(g, "loss"));
  return applyPrecision(g, req.precision);
}
