/**
 * Autodiff against central finite differences in f64 for the whole pretraining loss of a tiny BERT, in
 * train mode with dropout on (the Philox mask depends only on the key, so the loss is a smooth function
 * of the weights and finite differences apply).
 */
import assert from "node:assert/strict";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { defineBert } from "../../models/bert.ts";
import { numel } from "../../ir/mod.ts";
import { initParams } from "../../model_io/init_params.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { seededRandom } from "../../cases/random.ts";

const CONFIG = {
  vocab_size: 50,
  hidden_size: 16,
  num_hidden_layers: 2,
  num_attention_heads: 2,
  intermediate_size: 24,
  hidden_act: "gelu",
  hidden_dropout_prob: 0.1,
  attention_probs_dropout_prob: 0.1,
  max_position_embeddings: 16,
  type_vocab_size: 2,
  initializer_range: 0.5,
  layer_norm_eps: 1e-12,
  num_labels: 2,
};

/** n seeded integers in [lo, hi). */
function randomInts(seed: number, n: number, lo: number, hi: number): number[] {
  const r = seededRandom(seed);
  return Array.from({ length: n }, () => r.int(lo, hi));
}

Deno.test("tiny BERT pretraining loss: autodiff matches central finite differences (f64, dropout on)", () => {
  const [B, S, P] = [2, 8, 3];
  const g = defineBert("gradcheck", CONFIG).build({
    head: "pretraining",
    mode: "train",
    batchSize: B,
    seqLen: S,
    maxPredictions: P,
  });
  const withGrads = differentiate(g, "loss");
  const weights = initParams(g, 1234);
  const feeds: Record<string, ArrayLike<number>> = {
    input_ids: randomInts(1, B * S, 1, CONFIG.vocab_size),
    token_type_ids: [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1],
    attention_mask: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0],
    masked_lm_positions: [1, 4, 6, 2, 5, 0],
    masked_lm_ids: [...randomInts(2, 5, 1, CONFIG.vocab_size), -1],
    next_sentence_labels: [1, 0],
    rng_key: [99, 3],
  };
  const params: Record<string, Float64Array> = {};
  for (const [name, w] of weights) params[name] = Float64Array.from(w);
  const lossAt = () => evaluate(g, { ...feeds, ...params }, { outputs: ["loss"] }).get("loss")![0];
  const grads = evaluate(withGrads, { ...feeds, ...params });

  // Coordinates: for every parameter, its largest-gradient entry and one seeded random entry.
  const h = 1e-5;
  let checked = 0, worst = 0;
  for (const [name, node] of g.sources("param")) {
    const gr = grads.get(`grad.${name}`)!;
    let big = 0;
    for (let i = 1; i < gr.length; i++) if (Math.abs(gr[i]) > Math.abs(gr[big])) big = i;
    const rnd = randomInts(checked + 11, 1, 0, numel(node.type.shape))[0];
    for (const i of [big, rnd]) {
      const w = params[name], orig = w[i];
      w[i] = orig + h;
      const up = lossAt();
      w[i] = orig - h;
      const down = lossAt();
      w[i] = orig;
      const fd = (up - down) / (2 * h);
      const err = Math.abs(fd - gr[i]) / Math.max(Math.abs(fd), Math.abs(gr[i]), 1e-4);
      worst = Math.max(worst, err);
      assert.ok(
        err < 1e-5,
        `${name}[${i}]: autodiff ${gr[i]} vs finite difference ${fd} (relative error ${err})`,
      );
      checked++;
    }
  }
  assert.ok(checked >= 2 * 40, `checked ${checked} coordinates`);
  assert.ok(worst < 1e-5);
});
