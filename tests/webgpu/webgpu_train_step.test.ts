/**
 * A whole BERT training step — forward, backward and the parameter update, with dropout — on WebGPU,
 * fused and unfused, against the reference interpreter: the loss, every gradient and every updated
 * parameter. The model is the small HF fixture configuration (odd sizes on purpose: 37, 99).
 */
import { initParams } from "../../model_io/init_params.ts";
import { checkAgainstReference } from "../util/fused_check.ts";
import { seededRandom } from "../../cases/random.ts";
import { FIXTURE_CONFIG as CONFIG, fixtureStep } from "../util/bert_steps.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

for (const fuse of [true, false]) {
  const mode = fuse ? "fused" : "unfused";
  Deno.test({
    name: `webgpu training step (${mode}) matches the reference: loss, gradients, updates`,
    ignore: !gpu.ctx,
    fn: async () => {
      const [B, S, P] = [3, 12, 4];
      // The step itself; tests/webgpu/webgpu_optimizer_step.test.ts covers LAMB and AdamW.
      const g = fixtureStep("fp32", [B, S, P], "sgd");
      const r = seededRandom(fuse ? 11 : 12);
      const feeds: Record<string, ArrayLike<number>> = Object.fromEntries(initParams(g, 5));
      feeds.input_ids = Array.from({ length: B * S }, () => r.int(0, CONFIG.vocab_size));
      feeds.token_type_ids = Array.from({ length: B * S }, (_, i) => (i % S >= S / 2 ? 1 : 0));
      feeds.attention_mask = Array.from({ length: B * S }, (_, i) => (i % S < S - (i % 3) ? 1 : 0));
      feeds.masked_lm_positions = Array.from({ length: B * P }, () => r.int(0, S));
      feeds.masked_lm_ids = Array.from(
        { length: B * P },
        (_, i) => (i % 4 === 3 ? -1 : r.int(0, CONFIG.vocab_size)),
      );
      feeds.next_sentence_labels = Array.from({ length: B }, () => r.int(0, 2));
      feeds.rng_key = [r.u32(), 7];
      feeds.learning_rate = [0.05];
      // Gradients that are exactly zero in exact arithmetic (the key bias: softmax ignores a per-row
      // shift) are rounding noise on both sides; the absolute tolerance covers them.
      await checkAgainstReference(gpu.ctx!, g, feeds, { fuse, tol: { rtol: 1e-4, atol: 1e-6 } });
    },
  });
}
