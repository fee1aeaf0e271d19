/**
 * `deno task bench`: fused vs unfused on WebGPU, measured in one run — a BERT forward pass and a full
 * training step, and each fusion kind alone — as kernels launched, bytes moved (the compiler's traffic
 * model) and step time; plus the wall time of compiling BERT-large for training.
 *
 * Times are per step: the median over --iterations rounds of 4 steps submitted back to back, fused and
 * unfused rounds alternating, after one warm-up step each (lavapipe compiles shaders on first dispatch).
 * Each step is one command buffer.
 */
import { parseFlags, positiveInt, runMain } from "../cli/common.ts";
import { writeFileAtomic } from "../model_io/outputs.ts";
import { compileGraph } from "../compiler/driver/compile.ts";
import { buildModelGraph } from "../optimizer/model_graph.ts";
import { bytesMoved } from "../report/fusion_report.ts";
import { WEBGPU } from "../engine/backends.ts";
import { webgpuTarget } from "../compiler/targets/target.ts";
import { softwareAdapter } from "../runtime/webgpu/software.ts";
import { openRow } from "../engine/choose_backend.ts";
import type { Graph } from "../ir/mod.ts";
import large from "../models/bert-large.ts";
import tiny from "../models/bert-tiny.ts";
import { initParams } from "../model_io/init_params.ts";
import type { GpuContext } from "../runtime/webgpu/device.ts";
import { randomFeeds } from "../cases/random_feeds.ts";
import { FUSION_CASES, graphOf, setCaseSizes } from "../cases/fusion_cases.ts";
import { median, type Side, timeRound } from "./step_timing.ts";

const HELP = `
deno task bench [--batch-size N] [--seq-len S] [--iterations K] [--json FILE] [--skip-compile]
                [--case-batch B] [--case-seq S] [--case-hidden H]

Fused vs unfused on WebGPU in one run: BERT-tiny forward and training step (batch N, sequence S),
then each fusion kind alone; kernels launched, bytes moved and median step time, with ratios.
Finally the wall time of compiling BERT-large for a training step (fp16, batch 8, sequence 128) for the
adapter's target (lavapipe or webgpu-gpu), and its kernel count, which deno task compile --target gives too.

  --batch-size N   BERT-tiny batch (default 4)
  --seq-len S      BERT-tiny sequence length (default 64)
  --iterations K   timed steps per measurement, after one warm-up (default 5)
  --json FILE      also write the results as JSON
  --skip-compile   skip the BERT-large compile timing
  --case-batch B, --case-seq S, --case-hidden H
                   sizes of the per-fusion-kind graphs (default 16, 128, 256: large enough that the
                   kernels' work, not the fixed cost of a step, is what is timed)

Without a GPU, set DENO_WEBGPU_BACKEND=vulkan (Mesa's lavapipe).
`;

interface CaseResult {
  name: string;
  fused: Side;
  unfused: Side;
  ratios: { kernels: number; bytes: number; ms: number };
}

/**
 * Both sides compiled and warmed, then timed in alternating rounds (fused, unfused, fused, ...), so drift
 * on a noisy machine (another job, clocks, caches) hits both alike; one side after the other swung the
 * ratio from 0.71 to 1.49 between two runs.
 */
async function compare(
  ctx: GpuContext,
  name: string,
  g: Graph,
  feeds: Record<string, ArrayLike<number>>,
  iterations: number,
): Promise<CaseResult> {
  const sides = [];
  try {
    for (const fuse of [true, false]) {
      const { executor, compiled } = await WEBGPU.compile(ctx, g, fuse);
      sides.push({ executor, compiled, times: [] as number[] });
      for (const [n, data] of Object.entries(feeds)) executor.write(n, data);
      await executor.step();
      await executor.finish();
    }
    for (let i = 0; i < iterations; i++) for (const s of sides) s.times.push(await timeRound(s.executor));
  } finally {
    for (const s of sides) s.executor.destroy();
  }
  const [fused, unfused]: Side[] = sides.map((s) => ({
    kernels: s.compiled.plan.steps.filter((st) => st.op === "launch").length,
    bytes: bytesMoved(s.compiled.plan),
    ms: median(s.times),
  }));
  const r: CaseResult = {
    name,
    fused,
    unfused,
    ratios: {
      kernels: fused.kernels / unfused.kernels,
      bytes: fused.bytes / unfused.bytes,
      ms: fused.ms / unfused.ms,
    },
  };
  console.log(row(r));
  return r;
}

const pad = (s: string, n: number) => s.padEnd(n);
const num = (x: number, d = 0) => x.toFixed(d).padStart(8);
function row(r: CaseResult): string {
  const mb = (b: number) => b / 2 ** 20;
  return `${pad(r.name, 44)} ${num(r.fused.kernels)} ${num(r.unfused.kernels)} ${num(r.ratios.kernels, 2)}  ${
    num(mb(r.fused.bytes), 2)
  } ${num(mb(r.unfused.bytes), 2)} ${num(r.ratios.bytes, 2)}  ${num(r.fused.ms, 1)} ${num(r.unfused.ms, 1)} ${
    num(r.ratios.ms, 2)
  }`;
}

function bertFeeds(g: Graph, seq: number, vocab: number) {
  const feeds: Record<string, ArrayLike<number>> = Object.fromEntries(initParams(g, 1));
  const ids = randomFeeds(g, 2, {
    input_ids: (r) => r.int(1, vocab),
    token_type_ids: (_r, i) => (i % seq >= seq / 2 ? 1 : 0),
    attention_mask: (_r, i) => (i % seq < seq - 4 ? 1 : 0),
    masked_lm_positions: (r) => r.int(1, seq),
    masked_lm_ids: (r) => r.int(1, vocab),
    next_sentence_labels: (r) => r.int(0, 2),
    rng_key: (r) => r.u32(),
  });
  for (const n of g.sources("input").keys()) feeds[n] = ids[n];
  if ("learning_rate" in feeds) feeds.learning_rate = [1e-3];
  return feeds;
}

await runMain(async () => {
  const { values } = parseFlags(Deno.args, {
    "batch-size": { type: "string" },
    "seq-len": { type: "string" },
    iterations: { type: "string" },
    json: { type: "string" },
    "skip-compile": { type: "boolean" },
    "case-batch": { type: "string" },
    "case-seq": { type: "string" },
    "case-hidden": { type: "string" },
  }, HELP);
  const batch = positiveInt("batch-size", values["batch-size"], 4);
  const seq = positiveInt("seq-len", values["seq-len"], 64);
  const iterations = positiveInt("iterations", values.iterations, 5);
  const ctx = await openRow(WEBGPU);
  console.log(`device: ${ctx.description}`);
  console.log(
    `${pad("case", 44)} ${"kernels".padStart(8)} ${"unfused".padStart(8)} ${"ratio".padStart(8)}  ${
      "MiB".padStart(8)
    } ${"unfused".padStart(8)} ${"ratio".padStart(8)}  ${"ms".padStart(8)} ${"unfused".padStart(8)} ${
      "ratio".padStart(8)
    }`,
  );
  const cases: CaseResult[] = [];
  const preds = Math.max(1, Math.round(seq * 0.15));
  for (const mode of ["infer", "train"] as const) {
    const g = buildModelGraph({
      model: tiny,
      mode,
      precision: "fp32",
      batchSize: batch,
      seqLen: seq,
      maxPredictions: preds,
    });
    const name = `bert-tiny ${mode === "infer" ? "forward" : "training step"} b${batch} s${seq}`;
    cases.push(
      await compare(ctx, name, g, bertFeeds(g, seq, tiny.config.vocab_size), iterations),
    );
  }
  setCaseSizes(
    positiveInt("case-batch", values["case-batch"], 16),
    positiveInt("case-seq", values["case-seq"], 128),
    positiveInt("case-hidden", values["case-hidden"], 256),
  );
  for (const c of FUSION_CASES) {
    const g = graphOf(c.name, c.body, "f32", c.backward);
    cases.push(await compare(ctx, c.name.slice(0, 44), g, randomFeeds(g, 3, c.ints), iterations));
  }

  let compileMs: number | undefined, compileTarget: string | undefined, compileKernels: number | undefined;
  if (!values["skip-compile"]) {
    const t0 = performance.now();
    const g = buildModelGraph({
      model: large,
      mode: "train",
      precision: "fp16",
      batchSize: 8,
      seqLen: 128,
      maxPredictions: 20,
    });
    // The target the timed cases ran on (the adapter's, as the WebGPU backend picks it). Kernel counts differ
    // between targets (each profile fuses differently), so the line names the compile command that agrees.
    const target = webgpuTarget(softwareAdapter(ctx) !== undefined);
    const c = compileGraph(g, { fuse: true, target });
    compileMs = performance.now() - t0;
    [compileTarget, compileKernels] = [target.name, c.plan.kernels.length];
    console.log(
      `compile bert-large train fp16 b8 s128 --target ${target.name} (graph, passes, fusion, lowering, WGSL): ${
        compileMs.toFixed(0)
      } ms, ${compileKernels} kernels in the plan (as deno task compile models/bert-large.ts --target ${target.name})`,
    );
  }
  if (values.json) {
    const result = {
      device: ctx.description,
      date: new Date().toISOString().slice(0, 10),
      command: `deno task bench ${Deno.args.join(" ")}`.trim(),
      iterations,
      cases,
      compile_bert_large_train_ms: compileMs,
      compile_target: compileTarget,
      compile_kernels: compileKernels,
    };
    await writeFileAtomic(values.json, JSON.stringify(result, null, 2) + "\n");
    console.log(`wrote ${values.json}`);
  }
});
