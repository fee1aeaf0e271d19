/**
 * A whole BERT training step with the fused optimizer — forward, backward, LAMB or AdamW over the flat
 * parameter vector, loss scaling, clipping, the schedule — on WebGPU, fused and unfused, against the
 * reference interpreter: the loss, every gradient, the updated parameters, moments and state.
 */
import { OPT, type OptimizerKind } from "../../optimizer/update.ts";
import { checkAgainstReference } from "../util/fused_check.ts";
import { seededRandom } from "../../cases/random.ts";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { FIXTURE_CONFIG as CONFIG, fixtureStep } from "../util/bert_steps.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

for (const kind of ["lamb", "adamw"] as OptimizerKind[]) {
  for (const fuse of [true, false]) {
    Deno.test({
      name: `webgpu training step with ${kind} (${fuse ? "fused" : "unfused"}) matches the reference`,
      ignore: !gpu.ctx,
      fn: async () => {
        const [B, S, P] = [2, 12, 4];
        const g = fixtureStep("fp32", [B, S, P], { kind, dynamicScale: true });
        const r = seededRandom(fuse ? 21 : 22);
        const feeds = {
          ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: CONFIG.vocab_size }, r, 5),
          ...optimizerStepFeeds(g, r, 1024),
        };
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
