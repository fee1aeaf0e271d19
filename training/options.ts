/**
 * The options of a training run: NVIDIA's run_pretraining.py options in camel case (the CLI spells them
 * in kebab case), with their defaults, and the checks that turn a bad combination into one clear error.
 */
import type { Precision } from "../compiler/training_graph/mixed_precision.ts";
import { OPTIMIZER_DEFAULTS, type OptimizerKind } from "../optimizer/update.ts";
import type { BackendRequest } from "../engine/choose_backend.ts";
import type { BuiltInCorpus } from "../data/corpus/brown_shards.ts";

export interface TrainOptions {
  /** A models/*.ts file or a config.json. */
  model: string;
  /** Shard folder (deno task prepare-data), or a built-in corpus's name (prepared on first use). */
  inputDir?: string;
  outputDir: string;
  /** Sequences per optimizer update (split into gradientAccumulationSteps micro-batches). */
  trainBatchSize: number;
  learningRate: number;
  /**
   * Length of the learning-rate schedule, in steps; the run stops there. Default: TRAIN_DEFAULTS.maxSteps,
   * or REFERENCE_MAX_STEPS on the CPU interpreter.
   */
  maxSteps?: number;
  warmupProportion: number;
  gradientAccumulationSteps: number;
  /** "auto": fp16 on CUDA (mixed precision with dynamic loss scaling), fp32 elsewhere. */
  precision: Precision | "auto";
  /** A static loss scale; without it fp16 scales dynamically and fp32/bf16 do not scale. */
  lossScale?: number;
  /** Dynamic scaling's starting scale (default 2^16). */
  initLossScale: number;
  optimizer: OptimizerKind;
  /** Decoupled weight decay of LAMB and AdamW (biases and LayerNorm excepted). */
  weightDecay: number;
  seed: number;
  logFreq: number;
  numStepsPerCheckpoint: number;
  /** Stop after this many steps of this run (and checkpoint), as NVIDIA's script does. */
  stepsThisRun?: number;
  resumeFromCheckpoint: boolean;
  /** Hugging Face layout folder (config.json + model.safetensors) to start from. */
  initCheckpoint?: string;
  phase2: boolean;
  phase1EndStep: number;
  backend: BackendRequest;
  fuse: boolean;
  /** Complete checkpoints kept in the output folder. */
  keepCheckpoints: number;
  /**
   * At most this many bytes per flat-vector group (optimizer/flat_layout.ts), below the device's own
   * limit: tests force several groups with it. Absent: the backend's limit decides (none: one group).
   */
  maxGroupBytes?: number;
  /** Start cls.predictions.bias at the training targets' log frequencies (data/heldout.ts says why). */
  unigramBias?: boolean;
  /** Held-out instances evaluated at checkpoints (0: none); default 1024, none on the interpreter. */
  heldOutInstances?: number;
}

export class TrainOptionsError extends Error {
  override name = "TrainOptionsError";
}

export const TRAIN_DEFAULTS = {
  trainBatchSize: 8,
  learningRate: 6e-3, // NVIDIA's phase-1 LAMB rate
  maxSteps: 300,
  warmupProportion: 0.1,
  gradientAccumulationSteps: 1,
  initLossScale: 2 ** 16,
  optimizer: "lamb" as OptimizerKind,
  weightDecay: OPTIMIZER_DEFAULTS.weightDecay,
  seed: 42,
  logFreq: 10,
  numStepsPerCheckpoint: 100,
  phase1EndStep: 7038,
  keepCheckpoints: 3,
  heldOutInstances: 1024,
  corpus: "brown" as BuiltInCorpus,
} as const;

export function checkTrainOptions(o: TrainOptions): void {
  const bad = (msg: string): never => {
    throw new TrainOptionsError(msg);
  };
  if (o.trainBatchSize % o.gradientAccumulationSteps !== 0) {
    bad(
      `--train-batch-size ${o.trainBatchSize} is not a multiple of --gradient-accumulation-steps ` +
        `${o.gradientAccumulationSteps} (each update sums that many equal micro-batches)`,
    );
  }
  if (!(o.learningRate > 0 && Number.isFinite(o.learningRate))) bad(`--learning-rate must be positive`);
  if (!(o.warmupProportion >= 0 && o.warmupProportion < 1)) bad(`--warmup-proportion must be in [0, 1)`);
  if (o.lossScale !== undefined && !(o.lossScale > 0 && Number.isFinite(o.lossScale))) {
    bad(`--loss-scale must be a positive number`);
  }
  if (o.lossScale !== undefined && o.precision !== "fp16" && o.precision !== "auto") {
    bad(`--loss-scale applies to --precision fp16 only (fp32 and bf16 need no scaling)`);
  }
  if (o.phase2 && !(o.phase1EndStep >= 0)) bad(`--phase1-end-step must be a non-negative integer`);
  if (o.initCheckpoint && o.resumeFromCheckpoint && !o.phase2) {
    bad(`--init-checkpoint and --resume-from-checkpoint exclude each other (except with --phase2)`);
  }
}
