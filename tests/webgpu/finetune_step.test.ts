/**
 * One fine-tuning step, fused on WebGPU, against the reference interpreter: the task heads (sequence
 * classification, one-output regression, question answering) with forward, backward, dropout, BERT's
 * Adam with linear warmup and decay (degree 1), dynamic loss scaling and clipping — the loss, every
 * gradient, the updated moments and state. Fresh random inputs and weights (the small HF fixture config).
 */
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import { hparamsVector } from "../../optimizer/feeds.ts";
import { OPT } from "../../optimizer/update.ts";
import { defineBert, type Head } from "../../models/bert.ts";
import { readBertConfig } from "../../models/bert_config.ts";
import { initParams } from "../../model_io/init_params.ts";
import { seededRandom } from "../../cases/random.ts";
import { optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { checkAgainstReference } from "../util/fused_check.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();
const CONFIG = readBertConfig(
  new URL("../fixtures/hf-tiny/pretraining/config.json", import.meta.url).pathname,
);

const CASES: { name: string; head: Head; labels: number }[] = [
  { name: "classification, 3 classes", head: "classification", labels: 3 },
  { name: "regression (STS-B's one output)", head: "classification", labels: 1 },
  { name: "question answering", head: "qa", labels: 2 },
];

for (const c of CASES) {
  Deno.test({
    name: `fine-tuning step fused on WebGPU matches the reference: ${c.name}`,
    ignore: !gpu.ctx,
    fn: async () => {
      const [B, S] = [3, 16];
      const g = buildModelGraph({
        model: defineBert("tiny-fixture", { ...CONFIG, num_labels: c.labels }),
        mode: "train",
        head: c.head,
        precision: "fp32",
        batchSize: B,
        seqLen: S,
        optimizer: { kind: "adamw", dynamicScale: true },
      });
      const r = seededRandom(31 + c.labels);
      const feeds: Record<string, ArrayLike<number>> = {
        ...Object.fromEntries(initParams(g, 9)),
        // QA's qa_outputs.bias gradient (and the last LayerNorm bias's) sums the span logits' gradients over
        // positions, which sum to 0 per row (softmax): exactly 0, rounding noise on both sides. A loss scale
        // of 1 keeps that noise (which the scale multiplies) under the absolute tolerance.
        ...optimizerStepFeeds(g, r, c.head === "qa" ? 1 : 1024),
        [OPT.hparams]: hparamsVector({ base: 5e-5, warmupProportion: 0.1, totalSteps: 20, degree: 1 }),
        input_ids: Array.from({ length: B * S }, () => r.int(0, CONFIG.vocab_size)),
        token_type_ids: Array.from({ length: B * S }, (_, i) => (i % S >= S / 2 ? 1 : 0)),
        attention_mask: Array.from({ length: B * S }, (_, i) => (i % S < S - (i % 4) ? 1 : 0)),
        rng_key: [r.u32(), 3],
      };
      if (c.head === "qa") {
        feeds.start_positions = Array.from({ length: B }, () => r.int(0, S));
        feeds.end_positions = Array.from({ length: B }, () => r.int(0, S));
      } else if (c.labels === 1) {
        feeds.labels = Array.from({ length: B }, () => r.range(0, 5));
      } else feeds.labels = Array.from({ length: B }, () => r.int(0, c.labels));
      await checkAgainstReference(gpu.ctx!, g, feeds, {
        fuse: true,
        tol: { rtol: 2e-4, atol: 1e-6 },
        skip: (name) => name === OPT.flatParams,
      });
    },
  });
}
