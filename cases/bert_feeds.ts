/**
 * Feeds for one BERT pre-training step on fresh random data: token ids, segments, a ragged attention
 * mask, masked positions and labels (every fourth ignored), NSP labels and a dropout key — and, for the
 * fused optimizer, its tables and state with moments as after a few steps (m of either sign, v positive,
 * zero in the padding between tensors). Shared by the step tests.
 */
import { optimizerFeeds } from "../optimizer/feeds.ts";
import { type FlatLayout, flatLayoutOf } from "../optimizer/flat_layout.ts";
import { OPT } from "../optimizer/update.ts";
import type { Graph } from "../ir/mod.ts";
import { initParams } from "../model_io/init_params.ts";
import type { Rng } from "./random.ts";

export interface StepShape {
  readonly batch: number;
  readonly seq: number;
  readonly predictions: number;
  readonly vocab: number;
}

/** Parameters (initialized with `paramSeed`) and one batch of random pre-training inputs. */
export function batchFeeds(
  g: Graph,
  s: StepShape,
  r: Rng,
  paramSeed: number,
): Record<string, ArrayLike<number>> {
  const { batch: B, seq: S, predictions: P, vocab: V } = s;
  return {
    ...Object.fromEntries(initParams(g, paramSeed)),
    input_ids: Array.from({ length: B * S }, () => r.int(0, V)),
    token_type_ids: Array.from({ length: B * S }, (_, i) => (i % S >= S / 2 ? 1 : 0)),
    attention_mask: Array.from({ length: B * S }, (_, i) => (i % S < S - (i % 3) ? 1 : 0)),
    masked_lm_positions: Array.from({ length: B * P }, () => r.int(0, S)),
    masked_lm_ids: Array.from({ length: B * P }, (_, i) => (i % 4 === 3 ? -1 : r.int(0, V))),
    next_sentence_labels: Array.from({ length: B }, () => r.int(0, 2)),
    rng_key: [r.u32(), 7],
  };
}

/**
 * The optimizer's inputs mid-run: step 6 of a 20-step schedule, the given loss scale, moments set; in
 * the layout the graph's optimizer was built with (its default, unless given).
 */
export function optimizerStepFeeds(
  g: Graph,
  r: Rng,
  lossScale: number,
  layout: FlatLayout = flatLayoutOf(g),
): Record<string, ArrayLike<number>> {
  const feeds: Record<string, ArrayLike<number>> = optimizerFeeds(
    layout,
    { base: 0.01, warmupProportion: 0.2, totalSteps: 20, degree: 0.5 },
    { step: 6, lossScale, cleanSteps: 3 },
  );
  const m = new Float32Array(layout.total), v = new Float32Array(layout.total);
  for (const s of layout.segments) {
    for (let i = s.offset; i < s.offset + s.size; i++) {
      m[i] = 1e-3 * r.normal();
      v[i] = 1e-6 * Math.abs(r.normal());
    }
  }
  feeds[OPT.m] = m;
  feeds[OPT.v] = v;
  return feeds;
}
