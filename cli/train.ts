/** `deno task train`: BERT pre-training (MLM + NSP) with the fused step, LAMB/AdamW and checkpoints. */
import { fileURLToPath } from "node:url";
import { BACKEND_NAMES } from "../engine/choose_backend.ts";
import type { Precision } from "../compiler/training_graph/mixed_precision.ts";
import { TRAIN_DEFAULTS, type TrainOptions, TrainOptionsError } from "../training/options.ts";
import { REFERENCE_MAX_STEPS, runTraining } from "../training/run.ts";
import { CheckpointError } from "../training/checkpoint.ts";
import { ScheduleError } from "../training/schedule.ts";
import { checkpointFolder, intFlag, numberFlag, oneOf, parseFlags, positiveInt, runMain } from "./common.ts";
import { stringFlags, UsageError } from "./common.ts";
import { TrainUi } from "./train_ui.ts";
import { kebabFlags } from "./flag_spelling.ts";

const here = (rel: string) => fileURLToPath(new URL(rel, import.meta.url));
const DEFAULT_MODEL = here("../models/bert-tiny.ts");

/** A recipe is a set of flags; sentiment: a checkpoint that fine-tunes the sentiment set past a fresh init. */
const RECIPES: Record<string, string> = {
  sentiment: "--input-dir nlp-corpus --train-batch-size 32 --optimizer adamw --learning-rate 1e-3 " +
    "--weight-decay 0.1 --max-steps 7500 --num-steps-per-checkpoint 2500 --unigram-bias",
};

const HELP = `
deno task train [--model M] [--input-dir DIR] [--output-dir DIR] [--train-batch-size N]
                [--learning-rate LR] [--max-steps N] [--warmup-proportion P] [--weight-decay W]
                [--gradient-accumulation-steps N] [--precision fp32|fp16|bf16] [--loss-scale S]
                [--optimizer lamb|adamw] [--seed N] [--log-freq N] [--num-steps-per-checkpoint N]
                [--steps-this-run N] [--resume-from-checkpoint] [--init-checkpoint DIR]
                [--phase2 --phase1-end-step N] [--backend auto|cuda|webgpu|cpu|reference] [--no-fuse]

BERT pre-training (masked LM + next sentence prediction), NVIDIA's run_pretraining.py options in kebab
case. With no arguments: BERT-tiny on the built-in Brown corpus (prepared on first use), ${TRAIN_DEFAULTS.maxSteps} steps on
the best backend present. Each run folder holds metrics.jsonl, loss_curve.svg / loss_curve.png and ckpt_<step>/
checkpoints (Hugging Face config.json + model.safetensors, optimizer state, manifest; the last 3 kept).
Ctrl-C (or SIGTERM) finishes the step, writes a checkpoint and exits 0; a second Ctrl-C exits at once.

  --model M                      models/*.ts file or config.json (default: models/bert-tiny.ts)
  --input-dir DIR                shards from deno task prepare-data, or a built-in corpus: brown,
                                 sentiment-train (the sentiment set's train text), or nlp-corpus (npm nlp-corpus's
                                 100k sentences and that text 5 times: docs/training.md) (default ${TRAIN_DEFAULTS.corpus})
  --output-dir DIR               run folder (default: out/runs/<date>-<time>)
  --train-batch-size N           sequences per optimizer step (default ${TRAIN_DEFAULTS.trainBatchSize})
  --learning-rate LR             peak learning rate (default ${TRAIN_DEFAULTS.learningRate})
  --max-steps N                  length of the schedule and of the run, in steps (default ${TRAIN_DEFAULTS.maxSteps};
                                 ${REFERENCE_MAX_STEPS} on the CPU interpreter)
  --warmup-proportion P          fraction of max-steps warming up linearly (default ${TRAIN_DEFAULTS.warmupProportion}); then
                                 polynomial decay with degree 0.5 (NVIDIA's PolyWarmUpScheduler)
  --gradient-accumulation-steps N  micro-batches per step; train-batch-size must divide by it (default 1)
  --precision P                  fp32, fp16 (mixed: f16 GEMMs and activations, f32 master weights; dynamic
                                 loss scaling) or bf16 (CUDA only). Default: fp16 on CUDA, else fp32
  --loss-scale S                 a static loss scale for fp16 instead of dynamic scaling
  --init-loss-scale S            dynamic scaling's first scale (default 65536); it halves on overflow
                                 (the step is skipped) and doubles after 2000 clean steps
  --optimizer O                  lamb (default; NVIDIA's BERT LAMB) or adamw (BERT's Adam)
  --weight-decay W               decoupled weight decay, biases and LayerNorm excepted (default ${TRAIN_DEFAULTS.weightDecay})
  --seed N                       initialization, data order and dropout (default ${TRAIN_DEFAULTS.seed})
  --log-freq N                   steps between log lines and metrics.jsonl records (default ${TRAIN_DEFAULTS.logFreq})
  --num-steps-per-checkpoint N   steps between checkpoints (default ${TRAIN_DEFAULTS.numStepsPerCheckpoint})
  --steps-this-run N             stop after N steps of this run and checkpoint
  --resume-from-checkpoint       continue from the newest complete checkpoint in the output dir
  --init-checkpoint DIR          start from these weights (Hugging Face layout), fresh optimizer
  --phase2                       phase 2 (e.g. sequence 512 shards): start from ckpt_<phase1-end-step> in the
                                 output dir (or --init-checkpoint) with a fresh schedule, keeping the moments
  --phase1-end-step N            the last step of phase 1 (default ${TRAIN_DEFAULTS.phase1EndStep})
  --backend B                    auto (default: CUDA, else WebGPU on a real GPU, else cpu, else reference),
                                 cuda, webgpu, cpu (emitted C, oneDNN or OpenBLAS), reference
  --no-fuse                      one kernel per primitive op (the unfused baseline, for comparison)
  --keep-checkpoints N           complete checkpoints kept (default ${TRAIN_DEFAULTS.keepCheckpoints})
  --heldout-instances N          the last shard is held out; N of its instances are evaluated at checkpoints
                                 beside the unigram baseline (default ${TRAIN_DEFAULTS.heldOutInstances} on a built-in corpus; 0 none)
  --unigram-bias                 start the MLM decoder's bias at the training targets' log frequencies
  --recipe sentiment             these flags (ones given too win; docs/training.md has what they measured):
                                 ${RECIPES.sentiment}
`;

const BOOL = { type: "boolean" } as const;
const positiveNumber = (flag: string, v: string | undefined, fallback: number) =>
  numberFlag(flag, v, fallback, { min: 0, minExclusive: true });
const fraction = (flag: string, v: string | undefined, fallback: number) =>
  numberFlag(flag, v, fallback, { min: 0, max: 1, maxExclusive: true });
const nonNegativeInt = (flag: string, v: string | undefined, fallback: number) =>
  intFlag(flag, v, fallback, { min: 0 });

function stamp(d = new Date()): string {
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${
    p(d.getSeconds())
  }`;
}

await runMain(async () => {
  const spec = {
    ...stringFlags("model input-dir output-dir train-batch-size learning-rate max-steps warmup-proportion"),
    ...stringFlags("gradient-accumulation-steps precision loss-scale init-loss-scale optimizer seed"),
    ...stringFlags("log-freq num-steps-per-checkpoint steps-this-run init-checkpoint phase1-end-step"),
    ...stringFlags("backend keep-checkpoints heldout-instances recipe weight-decay"),
    "resume-from-checkpoint": BOOL,
    phase2: BOOL,
    "no-fuse": BOOL,
    "unigram-bias": BOOL,
  };
  const given = parseFlags(kebabFlags(Deno.args), spec, HELP).values;
  const recipe = given.recipe && RECIPES[oneOf("recipe", given.recipe, Object.keys(RECIPES), "")].split(" ");
  const values = recipe ? parseFlags(kebabFlags([...recipe, ...Deno.args]), spec, HELP).values : given;
  const init = values["init-checkpoint"];
  if (init !== undefined) checkpointFolder("--init-checkpoint", init);
  const backend = oneOf("backend", values.backend, BACKEND_NAMES, "auto");
  const precision = values.precision === undefined
    ? undefined
    : oneOf<Precision>("precision", values.precision, ["fp32", "fp16", "bf16"], "fp32");
  const D = TRAIN_DEFAULTS, v = values;
  const o: TrainOptions = {
    model: v.model ?? DEFAULT_MODEL,
    inputDir: v["input-dir"],
    outputDir: v["output-dir"] ?? `out/runs/${stamp()}`,
    trainBatchSize: positiveInt("train-batch-size", v["train-batch-size"], D.trainBatchSize),
    learningRate: positiveNumber("learning-rate", v["learning-rate"], D.learningRate),
    maxSteps: v["max-steps"] === undefined ? undefined : positiveInt("max-steps", v["max-steps"], 1),
    warmupProportion: fraction("warmup-proportion", v["warmup-proportion"], D.warmupProportion),
    gradientAccumulationSteps: positiveInt(
      "gradient-accumulation-steps",
      v["gradient-accumulation-steps"],
      D.gradientAccumulationSteps,
    ),
    precision: precision ?? "auto",
    lossScale: v["loss-scale"] === undefined ? undefined : positiveNumber("loss-scale", v["loss-scale"], 1),
    initLossScale: positiveNumber("init-loss-scale", v["init-loss-scale"], D.initLossScale),
    optimizer: oneOf("optimizer", v.optimizer, ["lamb", "adamw"], D.optimizer),
    weightDecay: fraction("weight-decay", v["weight-decay"], D.weightDecay),
    // The seed keys Philox as a 32-bit word.
    seed: intFlag("seed", v.seed, D.seed, { min: 0, max: 2 ** 32 - 1 }),
    logFreq: positiveInt("log-freq", v["log-freq"], D.logFreq),
    numStepsPerCheckpoint: positiveInt(
      "num-steps-per-checkpoint",
      v["num-steps-per-checkpoint"],
      D.numStepsPerCheckpoint,
    ),
    stepsThisRun: v["steps-this-run"] === undefined
      ? undefined
      : positiveInt("steps-this-run", v["steps-this-run"], 1),
    resumeFromCheckpoint: v["resume-from-checkpoint"] ?? false,
    initCheckpoint: init,
    phase2: v.phase2 ?? false,
    phase1EndStep: nonNegativeInt("phase1-end-step", v["phase1-end-step"], D.phase1EndStep),
    backend,
    fuse: !v["no-fuse"],
    unigramBias: v["unigram-bias"] ?? false,
    heldOutInstances: v["heldout-instances"] === undefined
      ? undefined
      : nonNegativeInt("heldout-instances", v["heldout-instances"], 0),
    keepCheckpoints: positiveInt("keep-checkpoints", v["keep-checkpoints"], D.keepCheckpoints),
  };
  const ui = new TrainUi(o);
  try {
    const result = await runTraining(o, ui.events());
    await ui.finish(result);
  } catch (e) {
    ui.close();
    if (e instanceof TrainOptionsError || e instanceof ScheduleError || e instanceof CheckpointError) {
      throw new UsageError(e.message);
    }
    throw e;
  }
});
