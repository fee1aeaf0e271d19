/** `deno task compile`: compile a model to fused kernels, a plan and a fusion report. */
import { basename } from "node:path";
import { isTargetName, TARGET_NAMES, type TargetName, TARGETS } from "../compiler/targets/target.ts";
import { compileGraph } from "../compiler/driver/compile.ts";
import { buildModelGraph } from "../optimizer/model_graph.ts";
import type { Precision } from "../compiler/training_graph/mixed_precision.ts";
import { figuresOf, fusionReport, predictionsOf } from "../report/fusion_report.ts";
import { gemmFlops, type Measured, parseTimings } from "../report/cost_model.ts";
import { checkCompileOutput, renderOutputs, writeOutputDir } from "../report/kernel_files.ts";
import { checkFileOutput, writeFileAtomic } from "../model_io/outputs.ts";
import { checkModelSize } from "../model_io/size_check.ts";
import { loadModel } from "../models/load.ts";
import { precisionRefusal, rowForLanguage } from "../engine/capabilities.ts";
import { oneOf, parseFlags, positiveInt, runMain, UsageError } from "./common.ts";
import { kebabFlags } from "./flag_spelling.ts";

const HELP = `
deno task compile MODEL [--mode train|infer] [--precision fp32|fp16|bf16] [--target NAME[,NAME]|all]
                        [--no-fuse] [--batch-size N] [--seq-len S] [--max-predictions P]
                        [--out DIR] [--summary FILE] [--measured FILE] [--compare-unfused]

Compiles a model (a models/*.ts file or a config.json) for one training step (forward, backward and
parameter update) or for inference, for one target at a time (a plan holds one language), and writes
kernels_generated/<model>-<mode>-<precision>/<target>/: one file per distinct kernel (cuda/*.cu,
wgsl/*.wgsl or c/*.c), the plan (plan.json) and a fusion report (report.md).

  MODEL              e.g. models/bert-large.ts (default: models/bert-tiny.ts)
  --mode M           train (default) or infer
  --precision P      fp32, fp16 (default; GEMMs on f16 operands with f32 accumulation) or bf16
  --target T         what the plan is for (compiler/targets/target.ts): cuda-sm90 (default; an H100, CUDA C
                     with cuBLASLt calls and flash attention), webgpu-gpu (WGSL for a GPU), lavapipe (WGSL for
                     a software adapter), cpu (C with BLAS calls); several separated by commas, or all
  --no-fuse          one kernel per primitive op (the unfused baseline); writes to a -unfused folder
  --batch-size N     sequences per step (default 8)
  --seq-len S        tokens per sequence (default 128)
  --max-predictions P  masked positions per sequence, train mode (default 20, NVIDIA's value at 128)
  --out DIR          output folder, with one target (default: kernels_generated/<model>-<mode>-<precision>
                     [-b<N>-s<S>[-p<P>] for another shape][-unfused]/<target>); with several, each goes to
                     DIR/<target>. It must be absent, empty or an earlier output of this command (it is replaced)
  --summary FILE     one target: also write {"kernels","launches_per_step","library_calls_per_step",
                     "bytes_per_step","peak_bytes","gemm_flops","gemm_flops_library",
                     "predicted_step_ms","predicted_seq_per_s","compile_ms"} as JSON (predictions: the
                     H100 cost model, cuda-sm90 only; null otherwise)
  --compare-unfused  also compile the unfused baseline (about a quarter of the time) for the report's and
                     the summary line's comparison columns
  --measured FILE    per-kernel GPU times, {"kernels": {name: ms}} (bench/gpu_train.ts --timings writes it from a
                     DEBUG=2 profile) or a flat {name: ms}: the report's H100 tables gain a measured column

Environment: DEBUG, DUMP_DIR, SKIP_PASSES, FUSION_FUEL (see the README).
`;

const mibOf = (bytes: number) => (bytes / 2 ** 20).toFixed(1);

/** The targets --target names: one or several, comma-separated, or all. */
function targetsOf(flag: string | undefined): TargetName[] {
  if (flag === "all") return [...TARGET_NAMES];
  const names = (flag ?? "cuda-sm90").split(",");
  for (const n of names) {
    if (!isTargetName(n)) {
      const hint = n === "cuda" ? " (cuda-sm90?)" : n === "wgsl" ? " (webgpu-gpu or lavapipe?)" : "";
      throw new UsageError(`--target ${n}${hint}: expected ${TARGET_NAMES.join(", ")} or all`);
    }
  }
  return [...new Set(names as TargetName[])];
}

await runMain(async () => {
  const t0 = performance.now();
  const { values, positionals } = parseFlags(
    kebabFlags(Deno.args),
    {
      mode: { type: "string" },
      precision: { type: "string" },
      target: { type: "string" },
      "no-fuse": { type: "boolean" },
      "compare-unfused": { type: "boolean" },
      "batch-size": { type: "string" },
      "seq-len": { type: "string" },
      "max-predictions": { type: "string" },
      out: { type: "string" },
      summary: { type: "string" },
      measured: { type: "string" },
    },
    HELP,
    true,
  );
  if (positionals.length > 1) throw new UsageError(`expected one model, got ${positionals.join(" ")}`);
  const modelPath = positionals[0] ?? "models/bert-tiny.ts";
  const mode = oneOf("mode", values.mode, ["train", "infer"], "train");
  const precision = oneOf<Precision>("precision", values.precision, ["fp32", "fp16", "bf16"], "fp16");
  const targets = targetsOf(values.target);
  const batchSize = positiveInt("batch-size", values["batch-size"], 8);
  const seqLen = positiveInt("seq-len", values["seq-len"], 128);
  const maxPredictions = positiveInt("max-predictions", values["max-predictions"], 20);
  const fuse = !values["no-fuse"];
  await Deno.stat(modelPath).catch(() => {
    throw new UsageError(`model file not found: ${modelPath}`);
  });
  const model = await loadModel(modelPath);
  const name = basename(modelPath).replace(/\.(ts|json)$/, "").replace(/^config$/, model.name);
  // Another shape gets a folder of its own: the default one holds the committed corpus (kernels_generated/).
  const preds = mode === "train" ? `-p${maxPredictions}` : "";
  const shape = batchSize === 8 && seqLen === 128 && maxPredictions === 20
    ? ""
    : `-b${batchSize}-s${seqLen}${preds}`;
  const outRoot = values.out ??
    `kernels_generated/${name}-${mode}-${precision}${shape}${fuse ? "" : "-unfused"}`;
  const outDirOf = (t: TargetName) =>
    values.out !== undefined && targets.length === 1 ? outRoot : `${outRoot}/${t}`;
  const refusal = targets.map((t) => precisionRefusal(rowForLanguage(TARGETS[t].language), precision)).find((
    r,
  ) => r);
  if (refusal) throw new UsageError(refusal);
  if (values.summary && targets.length > 1) throw new UsageError("--summary takes one --target");
  // Refusals before the work: an output over the model or someone's files, a model too large to build.
  for (const t of targets) await checkCompileOutput(outDirOf(t), `--out ${outDirOf(t)}`, [modelPath]);
  if (values.summary) {
    await checkFileOutput(values.summary, {
      label: `--summary ${values.summary}`,
      inputs: [modelPath, ...targets.map(outDirOf)],
      isOurs: async (p) => "compile_ms" in JSON.parse(await Deno.readTextFile(p)),
      oursLooksLike: "a summary written by deno task compile",
    });
  }
  let measured: Measured | undefined;
  if (values.measured) {
    if (!targets.includes("cuda-sm90")) throw new UsageError("--measured needs --target cuda-sm90");
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
  const graph = buildModelGraph({ model, mode, precision, batchSize, seqLen, maxPredictions });
  console.error(`${name}: ${graph.nodes.length} graph nodes; compiling (${fuse ? "fused" : "unfused"})…`);
  for (const t of targets) {
    const compiled = compileGraph(graph, { fuse, target: TARGETS[t] });
    const baseline = !values["compare-unfused"] || !fuse
      ? undefined
      : compileGraph(graph, { fuse: false, target: TARGETS[t], render: false });
    const command = `deno task compile ${
      [
        modelPath,
        "--mode",
        mode,
        "--precision",
        precision,
        "--target",
        t,
        ...(fuse ? [] : ["--no-fuse"]),
        ...(baseline ? ["--compare-unfused"] : []),
        "--batch-size",
        batchSize,
        "--seq-len",
        seqLen,
        ...(mode === "train" ? ["--max-predictions", maxPredictions] : []),
      ].join(" ")
    }`;
    const title = `${name}, ${mode}, ${precision}, batch ${batchSize}, sequence ${seqLen}, ${t}`;
    const report = fusionReport(title, command, compiled, baseline, { sequences: batchSize, measured });
    await writeOutputDir(outDirOf(t), renderOutputs(compiled.plan, command, report));
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
    const base = baseline && figuresOf(baseline);
    const vs = (n: number | string | undefined) => (n === undefined ? "" : ` (${n} unfused)`);
    console.log(
      `${outDirOf(t)}: ${figures.kernels} kernels${vs(base?.launches_per_step)}, ${
        mibOf(figures.bytes_per_step)
      } MiB ` +
        `moved per step${vs(base && mibOf(base.bytes_per_step))}, peak ${mibOf(figures.peak_bytes)} MiB, ` +
        `${(compileMs / 1000).toFixed(2)} s`,
    );
  }
});
