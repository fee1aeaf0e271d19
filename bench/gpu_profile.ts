/**
 * Per-kernel GPU times of one BERT step on CUDA (the DEBUG=2 profile: CUDA events around each launch), as
 * the timings file `deno task compile --measured` reads, so the fusion report's cost model gets a measured
 * column. The graph is the one `deno task compile` builds for the same flags, so kernel names match.
 *
 *   deno run -A bench/gpu_profile.ts [--model M] [--mode train|infer] [--precision fp16] [--batch-size 64]
 *       [--seq-len 128] [--max-predictions 20] [--iterations 5] --json FILE
 */
import { oneOf, parseFlags, positiveInt, runMain, UsageError } from "../cli/common.ts";
import { buildModelGraph } from "../compiler/model_graph.ts";
import type { Precision } from "../compiler/passes/precision.ts";
import { CUDA } from "../engine/backends.ts";
import { openRow } from "../engine/choose_backend.ts";
import { loadModel } from "../models/load.ts";
import { writeFileAtomic } from "../model_io/outputs.ts";
import { formatProfile } from "../runtime/webgpu/timing.ts";
import { seededRandom } from "../cases/random.ts";
import { batchFeeds, optimizerStepFeeds } from "../cases/bert_feeds.ts";

await runMain(async () => {
  const { values } = parseFlags(
    Deno.args,
    {
      model: { type: "string" },
      mode: { type: "string" },
      precision: { type: "string" },
      "batch-size": { type: "string" },
      "seq-len": { type: "string" },
      "max-predictions": { type: "string" },
      iterations: { type: "string" },
      json: { type: "string" },
    },
    "deno run -A bench/gpu_profile.ts [--model M] [--mode train|infer] [--precision P] [--batch-size N]\n" +
      "  [--seq-len S] [--max-predictions P] [--iterations K] --json FILE\n",
  );
  if (!values.json) throw new UsageError("--json FILE is required (where the timings go)");
  const modelPath = values.model ?? "models/bert-large.ts";
  const model = await loadModel(modelPath);
  const mode = oneOf("mode", values.mode, ["train", "infer"], "train");
  const precision = oneOf<Precision>("precision", values.precision, ["fp32", "fp16", "bf16"], "fp16");
  const batchSize = positiveInt("batch-size", values["batch-size"], 64);
  const seqLen = positiveInt("seq-len", values["seq-len"], 128);
  const maxPredictions = positiveInt("max-predictions", values["max-predictions"], 20);
  const iterations = positiveInt("iterations", values.iterations, 5);
  const ctx = await openRow(CUDA);
  // deno task compile's graph for the same flags (its defaults: LAMB, dynamic loss scaling in fp16).
  const g = buildModelGraph({ model, mode, precision, batchSize, seqLen, maxPredictions });
  const { executor, compiled } = await CUDA.compile(ctx, g, true);
  try {
    const r = seededRandom(1);
    const shape = {
      batch: batchSize,
      seq: seqLen,
      predictions: maxPredictions,
      vocab: model.config.vocab_size,
    };
    // batchFeeds holds the parameters too (seed 1); training adds the optimizer's inputs mid-run.
    const feeds = {
      ...batchFeeds(g, shape, r, 1),
      ...(mode === "train" ? optimizerStepFeeds(g, r, precision === "fp16" ? 2 ** 16 : 1) : {}),
    };
    for (const [name, v] of Object.entries(feeds)) {
      if (executor.plan.inputs[name] !== undefined || executor.plan.params[name] !== undefined) {
        executor.write(name, v);
      }
    }
    const p = await executor.profile(iterations);
    for (const line of formatProfile(p)) console.error(line);
    const kernels: Record<string, number> = {};
    for (const l of p.launches) kernels[l.name] = (kernels[l.name] ?? 0) + l.ns / 1e6;
    await writeFileAtomic(
      values.json,
      JSON.stringify(
        {
          device: ctx.description,
          date: new Date().toISOString().slice(0, 10),
          command: `deno run -A bench/gpu_profile.ts ${Deno.args.join(" ")}`,
          kernels_in_plan: compiled.plan.kernels.length,
          step_ms: p.stepMs,
          kernels,
        },
        null,
        2,
      ) + "\n",
    );
    console.log(
      `${Object.keys(kernels).length} kernels timed; step ${p.stepMs.toFixed(3)} ms (${ctx.description})`,
    );
  } finally {
    executor.destroy();
  }
});
