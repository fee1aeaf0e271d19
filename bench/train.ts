/**
 * `deno task bench:train`: training throughput of the default `deno task train` model (BERT-tiny, batch 8,
 * Brown corpus at sequence 64, LAMB), fused vs unfused, in one run on the WebGPU adapter at hand.
 *
 * Both plans step on the same real batches, alternating rounds so drift on a noisy machine hits both
 * alike; each round submits a few whole training steps (forward, backward, optimizer) back to back and
 * waits once. Prints a table and, with --json FILE, writes the figures with the device, date and command.
 */
import { buildModelGraph } from "../compiler/model_graph.ts";
import type { Precision } from "../compiler/passes/precision.ts";
import { optimizerFeeds } from "../compiler/optimizer/feeds.ts";
import { flatLayoutOf } from "../compiler/optimizer/layout.ts";
import { OPT } from "../compiler/optimizer/update.ts";
import { ensureBrownShards } from "../data/corpus/brown_shards.ts";
import { Loader } from "../data/loader.ts";
import { compileForWebGPU, requireWebGPU } from "../engine/webgpu_backend.ts";
import tiny from "../models/bert-tiny.ts";
import { initParams } from "../runtime/init.ts";
import { flatFromParams } from "../training/run_state.ts";
import { parseFlags, positiveInt, runMain } from "../cli/common.ts";
import { median, STEPS_PER_ROUND, timeRound } from "./step_timing.ts";

const HELP = `
deno task bench:train [--rounds N] [--batch-size N] [--precision fp32|fp16] [--json FILE]

Sequences per second of the default training step (BERT-tiny on the Brown corpus, sequence 64, LAMB),
fused vs unfused, measured in one run on the WebGPU adapter (lavapipe without a GPU:
DENO_WEBGPU_BACKEND=vulkan XDG_RUNTIME_DIR=/tmp).

  --rounds N       timed rounds per side, alternating (default 5), each ${STEPS_PER_ROUND} steps
  --batch-size N   sequences per step (default 8, the train default)
  --precision P    fp32 (default on WebGPU) or fp16
  --json FILE      also write the results as JSON
`;

await runMain(async () => {
  const { values } = parseFlags(Deno.args, {
    rounds: { type: "string" },
    "batch-size": { type: "string" },
    precision: { type: "string" },
    json: { type: "string" },
  }, HELP);
  const rounds = positiveInt("rounds", values.rounds, 5);
  const batch = positiveInt("batch-size", values["batch-size"], 8);
  const precision = (values.precision ?? "fp32") as Precision;
  const ctx = await requireWebGPU();
  const dir = await ensureBrownShards({ maxSeqLength: 64, maxPredictionsPerSeq: 10 });
  const loader = await Loader.open(dir, { batchSize: batch, seed: 1 });
  const graph = buildModelGraph({
    model: tiny,
    mode: "train",
    precision,
    batchSize: batch,
    seqLen: loader.seqLength,
    maxPredictions: loader.maxPredictions,
    optimizer: { kind: "lamb", dynamicScale: precision === "fp16" },
  });
  const layout = flatLayoutOf(graph);
  const sides = [];
  for (const fuse of [true, false]) {
    const { executor, compiled } = await compileForWebGPU(ctx, graph, fuse);
    executor.write(OPT.flatParams, flatFromParams(initParams(graph, 1), layout));
    const feeds = optimizerFeeds(
      layout,
      { learningRate: 6e-3, warmupProportion: 0.1, totalSteps: 1000, degree: 0.5 },
      { step: 0, lossScale: precision === "fp16" ? 2 ** 16 : 1 },
    );
    for (const [n, v] of Object.entries(feeds)) executor.write(n, v);
    const b = loader.next();
    for (const n of Object.keys(b)) {
      const v = (b as unknown as Record<string, unknown>)[n];
      if (v instanceof Int32Array) executor.write(n, v);
    }
    executor.write("rng_key", [1, 0]);
    const bytes = compiled.plan.kernels.reduce((a, k) => a + k.bytesRead + k.bytesWritten, 0);
    sides.push({ fuse, executor, kernels: compiled.plan.kernels.length, bytes, times: [] as number[] });
  }
  for (const s of sides) await timeRound(s.executor); // warm-up: pipelines, first submissions
  for (let r = 0; r < rounds; r++) for (const s of sides) s.times.push(await timeRound(s.executor));
  const rows = sides.map((s) => {
    const ms = median(s.times);
    return {
      impl: s.fuse ? "bertfuse" : "bertfuse-unfused",
      kernels: s.kernels,
      mib: s.bytes / 2 ** 20,
      ms,
      seqPerS: batch / (ms / 1000),
    };
  });
  const [f, u] = rows;
  console.log(
    `BERT-tiny training step, batch ${batch}, sequence ${loader.seqLength}, LAMB, ${precision}, ${ctx.description}`,
  );
  console.log(`| side | kernels | MiB moved | ms/step | seq/s |`);
  console.log(`|---|---|---|---|---|`);
  for (const r of rows) {
    console.log(
      `| ${r.impl} | ${r.kernels} | ${r.mib.toFixed(1)} | ${r.ms.toFixed(1)} | ${r.seqPerS.toFixed(2)} |`,
    );
  }
  console.log(
    `fused/unfused: kernels ${(f.kernels / u.kernels).toFixed(2)}, bytes ${(f.mib / u.mib).toFixed(2)}, ` +
      `time ${(f.ms / u.ms).toFixed(2)}, throughput ${(f.seqPerS / u.seqPerS).toFixed(2)}x`,
  );
  if (values.json) {
    await Deno.writeTextFile(
      values.json,
      JSON.stringify(
        {
          device: ctx.description,
          date: new Date().toISOString().slice(0, 10),
          command: `deno task bench:train ${Deno.args.join(" ")}`.trim(),
          cases: rows.map((r) => ({
            name: `bert-tiny-train-s${loader.seqLength}-b${batch}-${precision}`,
            impl: r.impl,
            seq_per_s: r.seqPerS,
            ms: r.ms,
            kernels: r.kernels,
            mib_moved: r.mib,
            peak_bytes: null,
          })),
        },
        null,
        2,
      ) + "\n",
    );
  }
  for (const s of sides) s.executor.destroy();
  loader.close();
});
