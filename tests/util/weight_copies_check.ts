/**
 * Shared by the weight-copy tests (compiler/passes/low_weight_copies.ts): a BERT training graph on the small HF
 * fixture with a chosen flat-layout chunk, a schedule whose steps move the weights visibly, and the check
 * that a copy is its master weights rounded, element for element.
 */
import assert from "node:assert/strict";
import type { ScheduleOptions } from "../../optimizer/feeds.ts";
import { type FlatLayout, flatLayoutOf } from "../../optimizer/flat_layout.ts";
import { appendOptimizer, appendScaledLoss } from "../../optimizer/update.ts";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { applyPrecision, type Precision } from "../../compiler/training_graph/mixed_precision.ts";
import type { StepShape } from "../../cases/bert_feeds.ts";
import type { Graph } from "../../ir/mod.ts";
import { loadModel } from "../../models/load.ts";
import { roundBF16, roundF16 } from "../../numeric/half.ts";
import { LOW_COPY_PREFIX } from "../../plan/low_copies.ts";

export interface CopyTrainGraph {
  readonly g: Graph;
  readonly layout: FlatLayout;
  readonly shape: StepShape;
}

/**
 * A LAMB training step (dynamic loss scaling under fp16) whose flat layout has `chunk` elements per chunk
 * (model_graph.ts's graph with the chunk chosen: 128 places every f16 copy on the binding alignment, the
 * fixture's own 64 only some), optionally cut into groups or accumulating micro-batches.
 */
export async function copyTrainGraph(
  precision: Precision,
  chunk: number,
  seq = 8,
  opts: { readonly maxGroupBytes?: number; readonly accumulationSteps?: number } = {},
): Promise<CopyTrainGraph> {
  const model = await loadModel("tests/fixtures/hf-tiny/pretraining/config.json");
  const shape = { batch: 2, seq, predictions: 3, vocab: model.config.vocab_size };
  const fwd = model.build({
    head: "pretraining",
    mode: "train",
    batchSize: shape.batch,
    seqLen: shape.seq,
    maxPredictions: shape.predictions,
    trackLocations: true,
  });
  const layout = flatLayoutOf(fwd, chunk, { maxGroupBytes: opts.maxGroupBytes });
  const g = appendOptimizer(differentiate(fwd, appendScaledLoss(fwd)), layout, {
    kind: "lamb",
    dynamicScale: precision === "fp16",
    ...opts,
  });
  return { g: applyPrecision(g, precision), layout, shape };
}

/** No warmup and a learning rate that moves every weight by several percent a step: stale copies show. */
export const MOVING_SCHEDULE: ScheduleOptions = { base: 0.05, warmupProportion: 0, totalSteps: 20 };

/** The parameters that have a kept copy: the `low:<name>` inputs among `names`. */
export function copiedParams(names: Iterable<string>): string[] {
  return [...names].filter((n) => n.startsWith(LOW_COPY_PREFIX) && !n.includes("flat.params"))
    .map((n) => n.slice(LOW_COPY_PREFIX.length)).sort();
}

/**
 * Throws unless, for every copied parameter, `copy` (a flat vector of low values, or per-name values)
 * holds exactly its weights in `master` (a flat f32 vector) rounded to `low`.
 */
export function assertCopyIsCast(
  layout: FlatLayout,
  master: ArrayLike<number>,
  copy: ArrayLike<number> | ((name: string) => ArrayLike<number>),
  copied: readonly string[],
  low: "f16" | "bf16",
  when: string,
): void {
  const round = low === "f16" ? roundF16 : roundBF16;
  assert.ok(copied.length > 0, `${when}: no copied parameter to check`);
  for (const name of copied) {
    const s = layout.segments.find((x) => x.name === name);
    assert.ok(s, `${when}: '${name}' is not in the layout`);
    const c = typeof copy === "function" ? copy(name) : copy;
    const at = typeof copy === "function" ? 0 : s.offset;
    for (let i = 0; i < s.size; i++) {
      const want = round(master[s.offset + i]);
      if (!Object.is(c[at + i], want)) {
        assert.fail(
          `${when}: copy of ${name}[${i}] is ${c[at + i]}, its weight ${
            master[s.offset + i]
          } rounds to ${want}`,
        );
      }
    }
  }
}
