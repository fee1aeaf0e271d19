/**
 * The options of a fine-tuning run: NVIDIA's run_squad.py / run_glue.py options in camel case (the CLI
 * spells them in kebab case, snake case accepted), their defaults, and the checks that turn a bad
 * combination into one clear error.
 */
import type { Precision } from "../../compiler/training_graph/mixed_precision.ts";
import type { BackendRequest } from "../../engine/choose_backend.ts";
import { TrainOptionsError } from "../options.ts";

export interface FinetuneOptions {
  /** sentiment (built-in), spam, classify, squad, or a GLUE task name. */
  task: string;
  /** Our checkpoint folder, a run folder (its newest checkpoint), or a Hugging Face model folder. */
  initCheckpoint?: string;
  /** Scale each weight matrix of the starting checkpoint to this RMS (init_weights.ts says why). */
  initWeightRms?: number;
  /** config.json or models/*.ts when starting without a checkpoint. */
  configFile?: string;
  vocabFile?: string;
  doLowerCase: boolean;
  doTrain: boolean;
  doEval: boolean;
  doPredict: boolean;
  /** SQuAD: the train JSON; classify: the train .jsonl/.csv/.tsv. */
  trainFile?: string;
  /** SQuAD: the dev JSON to evaluate/predict; classify: a dev file (default: a split of the train file). */
  predictFile?: string;
  /** GLUE: the task's folder of TSV files. */
  dataDir?: string;
  maxSeqLength?: number;
  docStride: number;
  maxQueryLength: number;
  versionTwoWithNegative: boolean;
  trainBatchSize: number;
  evalBatchSize: number;
  learningRate?: number;
  numTrainEpochs: number;
  maxSteps?: number;
  warmupProportion: number;
  gradientAccumulationSteps: number;
  precision: Precision | "auto";
  initLossScale: number;
  seed: number;
  nBestSize: number;
  maxAnswerLength: number;
  nullScoreDiffThreshold: number;
  outputDir: string;
  backend: BackendRequest;
  fuse: boolean;
  /** As TrainOptions.maxGroupBytes: a smaller flat-vector group than the device's limit (tests). */
  maxGroupBytes?: number;
  logFreq: number;
  numStepsPerCheckpoint: number;
  stepsThisRun?: number;
  resumeFromCheckpoint: boolean;
  keepCheckpoints: number;
  /** Use only the first N training examples (quick runs and tests). */
  trainLimit?: number;
  /** Evaluate on only the first N examples of each dev set. */
  evalLimit?: number;
}

export const FINETUNE_DEFAULTS = {
  task: "sentiment",
  doLowerCase: true,
  docStride: 128,
  maxQueryLength: 64,
  trainBatchSize: 32,
  evalBatchSize: 32,
  numTrainEpochs: 3,
  warmupProportion: 0.1,
  gradientAccumulationSteps: 1,
  initLossScale: 2 ** 16,
  seed: 42,
  nBestSize: 20,
  maxAnswerLength: 30,
  nullScoreDiffThreshold: 0,
  logFreq: 10,
  numStepsPerCheckpoint: 1000,
  keepCheckpoints: 2,
} as const;

export function checkFinetuneOptions(o: FinetuneOptions): void {
  const bad = (msg: string): never => {
    throw new TrainOptionsError(msg);
  };
  if (!o.doTrain && !o.doEval && !o.doPredict) {
    bad("nothing to do: give --do-train, --do-eval or --do-predict");
  }
  if (o.trainBatchSize % o.gradientAccumulationSteps !== 0) {
    bad(
      `--train-batch-size ${o.trainBatchSize} is not a multiple of --gradient-accumulation-steps ` +
        `${o.gradientAccumulationSteps} (each update sums that many equal micro-batches)`,
    );
  }
  if (o.learningRate !== undefined && !(o.learningRate > 0 && Number.isFinite(o.learningRate))) {
    bad(`--learning-rate must be positive`);
  }
  if (!(o.warmupProportion >= 0 && o.warmupProportion < 1)) bad(`--warmup-proportion must be in [0, 1)`);
  if (!(o.numTrainEpochs > 0)) bad(`--num-train-epochs must be positive`);
  if (o.initCheckpoint && o.resumeFromCheckpoint) {
    bad(`--init-checkpoint and --resume-from-checkpoint exclude each other (a resumed run has its weights)`);
  }
}
