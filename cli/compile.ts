/** `deno task compile`: compile a model to fused kernels, a plan and a fusion report. */
import { PROFILE_NAMES, PROFILES } from "../compiler/targets/profiles.ts";
import { basename } from "node:path";
import type { Emitter, Target } from "../compiler/build_plan.ts";
import { emitCUDA } from "../compiler/codegen/cuda.ts";
import { emitWGSL } from "../compiler/codegen/wgsl.ts";
import { compileGraph } from "../compiler/compile.ts";
import { buildModelGraph } from "../compiler/model_graph.ts";
import type { Precision } from "../compiler/passes/precision.ts";
import { figuresOf, fusionReport, predictionsOf } from "../compiler/report.ts";
import { gemmFlops, type Measured, parseTimings } from "../compiler/cost_model.ts";
import { checkCompileOutput, renderOutputs, targetsIn, writeOutputDir } from "../compiler/write_kernels.ts";
import { checkFileOutput, writeFileAtomic } from "../model_io/outputs.ts";
import { checkModelSize } from "../model_io/size_check.ts";
import { loadModel } from "../models/load.ts";
import { precisionRefusal, rowForTarget } from "../engine/capabilities.ts";
import { oneOf, parseFlags, positiveInt, runMain, UsageError } from "./common.ts";
import { kebabFlags } from "./flag_spelling.ts";

const HELP = `
deno task compile MODEL [--mode train|infer] [--precision fp32|fp16|bf16] [--target wgsl|cuda|all]
                        [--no-fuse] [--batch-size N] [--seq-len S] [--max-predictions P]
                        [--profile NAME] [--out DIR] [--summary FILE] [--measured FILE]

Compiles a model (a models/*.ts file or a config.json) for one training step (forward, backward and
parameter update) or for inference, and writes kernels_generated/<model>-<mode>-<precision>/:
one file per distinct kernel (wgsl/*.wgsl, cuda/*.cu), the plan (plan.json) and a fusion report
(report.md).

  MODEL              e.g. models/bert-large.ts (default: models/bert-tiny.ts)
  --mode M           train (default) or infer
  --precision P      fp32, fp16 (default; GEMMs on f16 operands with f32 accumulation) or bf16
  --target T         wgsl, cuda or all (default: without --out, the targets the folder already holds,
                     so regenerating a committed folder keeps every target; else wgsl)
  --no-fuse          one kernel per primitive op (the unfused baseline); writes to a -unfused folder
  --batch-size N     sequences per step (default 8)
  --seq-len S        tokens per sequence (default 128)
  --max-predictions P  masked positions per sequence, train mode (default 20, NVIDIA's value at 128)
  --profile NAME     what lowering tunes for (compiler/targets/profiles.ts): lavapipe, cpu, webgpu-gpu or
                     cuda-sm90 (default: cuda-sm90 with a CUDA target, else webgpu-gpu)
  --out DIR          output folder (default: kernels_generated/<model>-<mode>-<precision>[-unfused]);
                     it must be absent, empty or an earlier output of this command (it is replaced)
  --summary FILE     also write {"kernels","launches_per_step","library_calls_per_step",
                     "bytes_per_step","peak_bytes","gemm_flops","gemm_flops_library",
                     "predicted_step_ms","predicted_seq_per_s","compile_ms"} as JSON (predictions: the
                     H100 cost model, CUDA targets only; null otherwise)
  --measured FILE    per-kernel GPU times, {"kernels": {name: ms}} (bench/gpu_train.ts --timings writes it from a
                     DEBUG=2 profile) or a flat {name: ms}: the report's H100 tables gain a measured column

Environment: DEBUG, DUMP_DIR, SKIP_PASSES, FUSION_FUEL (see the README).
`;

// The compiler emits kernels without their description (it goes into the file header, write_kernels.ts),
// and its share-sources stage gives the same fusion in every layer one source.
const EMITTERS: Record<Target, Emitter | undefined> = { wgsl: emitWGSL, cuda: emitCUDA };

await runMain(async () => {
  const t0 = performance.now();
  const { values, positionals } = parseFlags(
    kebabFlags(Deno.args),
    {
      mode: { type: "string" },
      precision: { type: "string" },
      target: { type: "string" },
      "no-fuse": { type: "boolean" },
      "batch-size": { type: "string" },
      "seq-len": { type: "string" },
      "max-predictions": { type: "string" },
      out: { type: "string" },
      summary: { type: "string" },
      measured: { type: "string" },
      profile: { type: "string" },
    },
    HELP,
    true,
  );
  if (positionals.length > 1) throw new UsageError(`expected one model, got ${positionals.join(" ")}`);
  const modelPath = positionals[0] ?? "models/bert-tiny.ts";
  const mode = oneOf("mode", values.mode, ["train", "infer"], "train");
  const precision = oneOf<Precision>("precision", values.precision, ["fp32", "fp16", "bf16"], "fp16");
  const targetFlag = values.target === undefined
    ? undefined
    : oneOf("target", values.target, ["wgsl", "cuda", "all"], "wgsl");
  const batchSize = positiveInt("batch-size", values["batch-size"], 8);
  const seqLen = positiveInt("seq-len", values["seq-len"], 128);
  const maxPredictions = positiveInt("max-predictions", values["max-predictions"], 20);
  const fuse = !values["no-fuse"];
  await Deno.stat(modelPath).catch(() => {
    throw new UsageError(`model file not found: ${modelPath}`);
  });
  const model = await loadModel(modelPath);
  const name = basename(modelPath).replace(/\.(ts|json)$/, "").replace(/^config$/, model.name);
  const outDir = values.out ?? `kernels_generated/${name}-${mode}-${precision}${fuse ? "" : "-unfused"}`;
  // With no --out the folder is the committed one: keep every target it holds (a plain `deno task
  // compile models/bert-large.ts` must leave the repository as it found it).
  const held = values.out === undefined && targetFlag === undefined ? await targetsIn(outDir) : [];
  const target = targetFlag ?? (held.length === 2 ? "all" : held[0] ?? "wgsl");
  const targets: Target[] = target === "all" ? ["wgsl", "cuda"] : [target];
  for (const t of targets) {
    if (!EMITTERS[t]) throw new UsageError(`--target ${t}: the ${t} emitter is not available in this build`);
  }
  const refusal = targets.map((t) => precisionRefusal(rowForTarget(t), precision)).find((r) => r);
  if (refusal) throw new UsageError(refusal);
  // Refusals before the work: an output over the model or someone's files, a model too large to build.
  await checkCompileOutput(outDir, `--out ${outDir}`, [modelPath]);
  if (values.summary) {
    await checkFileOutput(values.summary, {
      label: `--summary ${values.summary}`,
      inputs: [modelPath, outDir],
      isOurs: async (p) => "compile_ms" in JSON.parse(await Deno.readTextFile(p)),
      oursLooksLike: "a summary written by deno task compile",
    });
  }
  let measured: Measured | undefined;
  if (values.measured) {
    if (!targets.includes("cuda")) throw new UsageError("--measured needs --target cuda or all");
    const text = await Deno.readTextFile(values.measured).catch(() => {
      throw new UsageError(`--measured: cannot read ${values.measured}`);
    });
    try {
      measured = parseTimings(text, `--measured ${values.measured}`);
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
  }
  checkModelSize(model.config, {
    mode,
    batchSize,
    seqLen,
    maxPredictions,
    what: modelPath,
    compileOnly: true,
  });
  const emitters = Object.fromEntries(targets.map((t) => [t, EMITTERS[t]!]));
  const profile = values.profile === undefined
    ? (targets.includes("cuda") ? "cuda-sm90" : "webgpu-gpu")
    : oneOf("profile", values.profile, PROFILE_NAMES, "webgpu-gpu");
  const graph = buildModelGraph({ model, mode, precision, batchSize, seqLen, maxPredictions });
  console.error(`${name}: ${graph.nodes.length} graph nodes; compiling (${fuse ? "fused" : "unfused"})…`);
  const compiled = compileGraph(graph, { fuse, emitters, profile: PROFILES[profile] });
  const baseline = fuse ? compileGraph(graph, { fuse: false, emitters: {} }) : compiled;
  const command = `deno task compile ${
    [
      modelPath,
      "--mode",
      mode,
      "--precision",
      precision,
      "--target",
      target,
      ...(fuse ? [] : ["--no-fuse"]),
      "--batch-size",
      batchSize,
      "--seq-len",
      seqLen,
      ...(mode === "train" ? ["--max-predictions", maxPredictions] : []),
    ]
      .join(" ")
  }`;
  const title = `${name}, ${mode}, ${precision}, batch ${batchSize}, sequence ${seqLen}`;
  const files = renderOutputs(
    compiled.plan,
    command,
    fusionReport(title, command, compiled, baseline, {
      sequences: batchSize,
      measured,
    }),
  );
  await writeOutputDir(outDir, files);
  const compileMs = performance.now() - t0;
  const predicted = predictionsOf(compiled)[0];
  const figures = {
    ...figuresOf(compiled),
    ...gemmFlops(compiled.plan),
    predicted_step_ms: predicted ? Number((predicted.seconds * 1e3).toFixed(4)) : null,
    predicted_seq_per_s: predicted ? Math.round(batchSize / predicted.seconds) : null,
    compile_ms: Math.round(compileMs),
  };
  if (values.summary) await writeFileAtomic(values.summary, JSON.stringify(figures, null, 2) + "\n");
  const base = figuresOf(baseline);
  console.log(
    `${outDir}: ${figures.kernels} kernels (${base.launches_per_step} unfused), ${
      (figures.bytes_per_step / 2 ** 20).toFixed(1)
    } MiB moved per step (${(base.bytes_per_step / 2 ** 20).toFixed(1)} unfused), peak ${
      (figures.peak_bytes / 2 ** 20).toFixed(1)
    } MiB, ${(compileMs / 1000).toFixed(2)} s`,
  );
});
