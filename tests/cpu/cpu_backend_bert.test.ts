/**
 * BERT on the CPU backend against the reference interpreter: BERT-tiny (models/bert-tiny.ts) inference in
 * f32 and with f16 storage, and a whole training step with LAMB and dynamic loss scaling (forward,
 * backward, the fused optimizer over the flat parameter vector) — the loss, every gradient, the updated
 * parameters, moments and state — fused on BERT-tiny and unfused on the small HF fixture configuration.
 */
import assert from "node:assert/strict";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import { OPT } from "../../optimizer/update.ts";
import type { Precision } from "../../compiler/training_graph/mixed_precision.ts";
import { seededRandom } from "../../cases/random.ts";
import { initParams } from "../../model_io/init_params.ts";
import { loadModel } from "../../models/load.ts";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { checkCpuAgainstReference, testCpu } from "../util/cpu_check.ts";
import { F16_TOL } from "../util/fused_check.ts";

const cpu = await testCpu();

for (const precision of ["fp32", "fp16"] as Precision[]) {
  Deno.test({
    name: `cpu BERT-tiny inference (${precision}) matches the reference`,
    ignore: !cpu.ctx,
    fn: async () => {
      const model = await loadModel("models/bert-tiny.ts");
      const [B, S] = [2, 16];
      const g = buildModelGraph({ model, mode: "infer", precision, batchSize: B, seqLen: S });
      const r = seededRandom(precision === "fp32" ? 31 : 32);
      const feeds: Record<string, ArrayLike<number>> = {
        ...Object.fromEntries(initParams(g, 9)),
        input_ids: Array.from({ length: B * S }, () => r.int(0, model.config.vocab_size)),
        token_type_ids: Array.from({ length: B * S }, (_, i) => (i % S >= S / 2 ? 1 : 0)),
        attention_mask: Array.from({ length: B * S }, (_, i) => (i % S < S - 3 * (i >= S ? 1 : 0) ? 1 : 0)),
      };
      const tol = precision === "fp32" ? { rtol: 1e-4, atol: 1e-5 } : F16_TOL;
      const r1 = await checkCpuAgainstReference(cpu.ctx!, g, feeds, { fuse: true, tol });
      if (precision === "fp32") assert.ok(r1.libraryGemms > 0, "no GEMM ran through sgemm");
    },
  });
}

for (
  const [model, fuse] of [["models/bert-tiny.ts", true], [
    "tests/fixtures/hf-tiny/pretraining/config.json",
    false,
  ]] as const
) {
  Deno.test({
    name: `cpu training step with LAMB and loss scaling (${model}, ${
      fuse ? "fused" : "unfused"
    }) matches the reference`,
    ignore: !cpu.ctx,
    fn: async () => {
      const m = await loadModel(model);
      const [B, S, P] = [2, 16, 4];
      const g = buildModelGraph({
        model: m,
        mode: "train",
        precision: "fp32",
        batchSize: B,
        seqLen: S,
        maxPredictions: P,
        optimizer: { kind: "lamb", dynamicScale: true },
      });
      const r = seededRandom(fuse ? 41 : 42);
      const feeds = {
        ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: m.config.vocab_size }, r, 5),
        ...optimizerStepFeeds(g, r, 1024),
      };
      // flat.params is the parameters' own buffer, read back after the step copied the update into it;
      // new:flat.params is what the reference computes for it.
      await checkCpuAgainstReference(cpu.ctx!, g, feeds, {
        fuse,
        tol: { rtol: 2e-4, atol: 1e-6 },
        skip: (name) => name === OPT.flatParams,
      });
    },
  });
}
