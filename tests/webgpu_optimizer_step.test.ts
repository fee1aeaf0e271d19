/**
 * A whole BERT training step with the fused optimizer — forward, backward, LAMB or AdamW over the flat
 * parameter vector, loss scaling, clipping, the schedule — on WebGPU, fused and unfused, against the
 * reference interpreter: the loss, every gradient, the updated parameters, moments and state.
 */
import { buildModelGraph } from "../compiler/model_graph.ts";
import { optimizerFeeds } from "../compiler/optimizer/feeds.ts";
import { flatLayoutOf } from "../compiler/optimizer/layout.ts";
import { OPT, type OptimizerKind } from "../compiler/optimizer/update.ts";
import { defineBert } from "../models/bert.ts";
import { readBertConfig } from "../models/bert_config.ts";
import { initParams } from "../runtime/init.ts";
import { checkAgainstReference } from "./util/fused_check.ts";
import { seededRandom } from "./util/random.ts";
import { testGpu } from "./util/webgpu.ts";

const gpu = await testGpu();
const CONFIG = readBertConfig(
  new URL("./fixtures/hf-tiny/pretraining/config.json", import.meta.url).pathname,
);

for (const kind of ["lamb", "adamw"] as OptimizerKind[]) {
  for (const fuse of [true, false]) {
    Deno.test({
      name: `webgpu training step with ${kind} (${fuse ? "fused" : "unfused"}) matches the reference`,
      ignore: !gpu.ctx,
      fn: async () => {
        const [B, S, P] = [2, 12, 4];
        const g = buildModelGraph({
          model: defineBert("tiny-fixture", CONFIG),
          mode: "train",
          precision: "fp32",
          batchSize: B,
          seqLen: S,
          maxPredictions: P,
          optimizer: { kind, dynamicScale: true },
        });
        const layout = flatLayoutOf(g);
        const r = seededRandom(fuse ? 21 : 22);
        const feeds: Record<string, ArrayLike<number>> = {
          ...Object.fromEntries(initParams(g, 5)),
          ...optimizerFeeds(
            layout,
            { learningRate: 0.01, warmupProportion: 0.2, totalSteps: 20, degree: 0.5 },
            { step: 6, lossScale: 1024, cleanSteps: 3 },
          ),
        };
        // Moments as after a few steps: m of either sign, v positive (zero in the padding).
        const m = new Float32Array(layout.total), v = new Float32Array(layout.total);
        for (const s of layout.segments) {
          for (let i = s.offset; i < s.offset + s.size; i++) {
            m[i] = 1e-3 * r.normal();
            v[i] = 1e-6 * Math.abs(r.normal());
          }
        }
        feeds[OPT.m] = m;
        feeds[OPT.v] = v;
        feeds.input_ids = Array.from({ length: B * S }, () => r.int(0, CONFIG.vocab_size));
        feeds.token_type_ids = Array.from({ length: B * S }, (_, i) => (i % S >= S / 2 ? 1 : 0));
        feeds.attention_mask = Array.from({ length: B * S }, (_, i) => (i % S < S - (i % 3) ? 1 : 0));
        feeds.masked_lm_positions = Array.from({ length: B * P }, () => r.int(0, S));
        feeds.masked_lm_ids = Array.from({ length: B * P }, () => r.int(0, CONFIG.vocab_size));
        feeds.next_sentence_labels = Array.from({ length: B }, () => r.int(0, 2));
        feeds.rng_key = [r.u32(), 7];
        // flat.params is the parameters' own buffer, read back after the step copied the update into it;
        // new:flat.params is what the reference computes for it.
        await checkAgainstReference(gpu.ctx!, g, feeds, {
          fuse,
          tol: { rtol: 2e-4, atol: 1e-6 },
          skip: (name) => name === OPT.flatParams,
        });
      },
    });
  }
}
