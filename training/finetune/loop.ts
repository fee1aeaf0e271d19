/**
 * A fine-tuning run: the task's data, the model with its task head, the fused training step (forward,
 * backward, BERT's Adam with linear warmup and linear decay, dynamic loss scaling in fp16, gradient
 * accumulation, clipping, all on the device as in pre-training: training/device_setup.ts), evaluation
 * before and after, checkpoints with exact resume, and the run folder's files.
 */
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import { flatLayoutOf } from "../../optimizer/flat_layout.ts";
import { OPT, STATE } from "../../optimizer/update.ts";
import type { Precision } from "../../compiler/training_graph/mixed_precision.ts";
import { loadTokenizer } from "../../data/tokenizer/mod.ts";
import { openBackend } from "../../engine/choose_backend.ts";
import { initParams } from "../../model_io/init_params.ts";
import { checkModelSize } from "../../model_io/size_check.ts";
import { defineBert, type Head } from "../../models/bert.ts";
import type { BertConfig } from "../../models/bert_config.ts";
import { loadModel } from "../../models/load.ts";
import type { StepExecutor } from "../../runtime/backend.ts";
import {
  CheckpointError,
  exists,
  findNewestCheckpoint,
  type LoadedCheckpoint,
  readCheckpoint,
} from "../checkpoint.ts";
import { tokenizerPart } from "../checkpoint_tokenizer.ts";
import {
  flatGroupBudget,
  launchUpdate,
  saveDeviceCheckpoint,
  writeCheckpointStart,
  writeFreshStart,
  writeOptimizerConstants,
} from "../device_setup.ts";
import { TrainOptionsError } from "../options.ts";
import { paramsFromFlat, readFlat } from "../run_state.ts";
import { breathe } from "../signals.ts";
import { batchFeed, RowOrder } from "./batches.ts";
import { evaluateSet, majorityBaseline, type SetResult } from "./evaluate.ts";
import { naiveBayesAccuracy } from "../../data/finetune/naive_bayes.ts";
import { loadStartWeights, readStartConfig, resolveStart } from "./init_weights.ts";
import { checkFinetuneOptions, type FinetuneOptions } from "./options.ts";
import { type EvalRecord, writeEvalResults, writePredictions } from "./outputs.ts";
import { loadTask, type TaskData, taskDefaults } from "./tasks.ts";

const BERT_TINY = new URL("../../models/bert-tiny.ts", import.meta.url).pathname;

export interface FinetuneRecord {
  step: number;
  epoch: number;
  loss: number;
  /** Training-batch accuracy (classification only). */
  accuracy?: number;
  loss_scale: number;
  learning_rate: number;
  grad_norm: number;
  skipped_steps: number;
  optimizer_steps: number;
  seq_per_s: number;
  elapsed_s: number;
}

export interface FinetuneEvents {
  info?(msg: string): void;
  start?(s: { step: number; resumed: boolean; stopAt: number }): Promise<void> | void;
  log?(r: FinetuneRecord): void;
  checkpoint?(dir: string, step: number): Promise<void> | void;
  evaluated?(phase: "before" | "after", results: SetResult[]): void;
  stopRequested?(): boolean;
}

export interface FinetuneResult {
  outputDir: string;
  step: number;
  totalSteps: number;
  stoppedBy: "done" | "steps-this-run" | "signal";
  lastCheckpoint?: string;
  records: FinetuneRecord[];
  backend: string;
  before?: SetResult[];
  after?: SetResult[];
  /** Majority-class and bag-of-words Naive Bayes (trained on the train rows) accuracy per labelled set. */
  majority: Record<string, number>;
  naiveBayes: Record<string, number>;
  files: string[];
}

const ARCH_HEAD: Record<string, string> = {
  BertForSequenceClassification: "classification",
  BertForQuestionAnswering: "qa",
};

export async function runFinetune(o: FinetuneOptions, ev: FinetuneEvents = {}): Promise<FinetuneResult> {
  checkFinetuneOptions(o);
  const info = ev.info ?? (() => {});

  // ---- where to start: this run's newest checkpoint (resume), --init-checkpoint, out/runs/, or fresh ----
  const newest = await findNewestCheckpoint(o.outputDir).catch(() => undefined);
  if (newest && !o.resumeFromCheckpoint) {
    throw new CheckpointError(
      `${o.outputDir} already has checkpoints (newest ${newest}); pass --resume-from-checkpoint to continue ` +
        `that run, or choose another --output-dir (nothing was overwritten)`,
    );
  }
  if (!newest && o.resumeFromCheckpoint) {
    throw new CheckpointError(`${o.outputDir}: no complete checkpoint to resume from`);
  }
  let resume: LoadedCheckpoint | undefined;
  let startDir: string | undefined;
  let config: BertConfig;
  if (newest) {
    resume = await readCheckpoint(newest);
    config = readStartConfig(newest);
    info(`resuming from ${newest} (step ${resume.step})`);
  } else {
    const start = await resolveStart(o.initCheckpoint);
    startDir = start.dir;
    const none = `--init-weight-rms scales a checkpoint's weights, but there is none (${start.why})`;
    if (!startDir && o.initWeightRms !== undefined) throw new TrainOptionsError(none);
    info(start.dir ? `initial weights: ${start.dir} (${start.why})` : start.why);
    config = start.dir ? readStartConfig(start.dir) : (await loadModel(o.configFile ?? BERT_TINY)).config;
  }
  const vocab = o.vocabFile ??
    (startDir && await exists(`${startDir}/vocab.txt`) ? `${startDir}/vocab.txt` : undefined) ??
    (newest && await exists(`${newest}/vocab.txt`) ? `${newest}/vocab.txt` : undefined);
  const tok = await loadTokenizer({ vocab, cased: !o.doLowerCase });
  if (tok.vocabSize > config.vocab_size) {
    const which = `the vocabulary (${vocab ?? "built-in"}, ${tok.vocabSize} tokens)`;
    throw new TrainOptionsError(`${which} is larger than the model's vocab_size ${config.vocab_size}`);
  }

  // ---- data (every data error stops the run here, before anything is compiled or written) ----
  const data = await loadTask(o, tok);
  if (o.doTrain && data.train.length === 0) {
    throw new TrainOptionsError(`--task ${data.task}: no training examples`);
  }
  const head: Head = data.kind === "qa" ? "qa" : "classification";
  const numLabels = data.kind === "regression" ? 1 : Math.max(2, data.labels.length);
  if (resume) {
    const arch = ((resume.config.architectures ?? []) as string[]).map((a) => ARCH_HEAD[a]).find(Boolean);
    if (arch !== head || (head === "classification" && resume.config.num_labels !== numLabels)) {
      throw new CheckpointError(
        `${resume.dir}: saved for another task head; it cannot resume --task ${data.task}`,
      );
    }
  }
  const model = defineBert(`bert-${data.task}`, { ...config, num_labels: numLabels });

  const choice = await openBackend(o.backend);
  const precision: Precision = o.precision !== "auto" ? o.precision : choice.row.autoPrecision;
  const refusal = choice.refusePrecision(precision);
  if (refusal) throw new TrainOptionsError(refusal);

  const micro = o.trainBatchSize / o.gradientAccumulationSteps;
  // Before any graph is built: an absurd config or batch is one line, not minutes ending out of memory.
  // Task heads have no vocabulary logits (maxPredictions 0).
  const size = {
    seqLen: data.seqLen,
    maxPredictions: 0,
    what: startDir ?? newest ?? o.configFile ?? BERT_TINY,
  };
  if (o.doTrain) checkModelSize(config, { ...size, mode: "train", batchSize: micro });
  if (o.doEval || o.doPredict) checkModelSize(config, { ...size, mode: "infer", batchSize: o.evalBatchSize });
  const steps = o.maxSteps ??
    Math.max(1, Math.ceil((o.numTrainEpochs * data.train.length) / o.trainBatchSize));
  const learningRate = o.learningRate ?? taskDefaults(data.task).learningRate;
  const maxGroupBytes = flatGroupBudget(choice.limits, o.maxGroupBytes);
  const graph = buildModelGraph({
    model,
    mode: "train",
    head,
    precision,
    batchSize: micro,
    seqLen: data.seqLen,
    optimizer: {
      kind: "adamw",
      dynamicScale: precision === "fp16",
      accumulationSteps: o.gradientAccumulationSteps,
      maxGroupBytes,
    },
  });
  const layout = flatLayoutOf(graph, undefined, { maxGroupBytes });
  let weights: Map<string, Float32Array> | undefined;
  if (!resume) {
    if (startDir) {
      const loaded = await loadStartWeights(graph, startDir, data.kind, o.seed, o.initWeightRms);
      if (loaded.note) info(loaded.note);
      weights = loaded.weights;
    } else weights = initParams(graph, o.seed);
  }
  const evalGraph = buildModelGraph({
    model,
    mode: "infer",
    head,
    precision,
    batchSize: o.evalBatchSize,
    seqLen: data.seqLen,
  });
  const train = o.doTrain ? await choice.compile(graph, o.fuse) : undefined;
  const evaluator = (o.doEval || o.doPredict) ? await choice.compile(evalGraph, o.fuse) : undefined;
  const kernels = train?.compiled?.plan.kernels.length ?? 0;
  const devSets = data.evals.map((e) => `${e.name} ${e.rows.length}`).join(", ") || "no dev set";
  const on = `${precision} on ${choice.kind} (${choice.why})${
    kernels ? `, ${kernels} kernels per step` : ""
  }`;
  info(`${data.task}: ${data.train.length} training rows, sequence ${data.seqLen}, ${devSets}; ${on}`);

  const post = {
    nBest: o.nBestSize,
    maxAnswerLength: o.maxAnswerLength,
    nullScoreDiffThreshold: o.nullScoreDiffThreshold,
  };
  const evalWith = async (
    params: Map<string, ArrayLike<number>>,
    sets = data.evals,
  ): Promise<SetResult[]> => {
    const ex = evaluator!.executor;
    for (const [name] of evalGraph.sources("param")) ex.write(name, params.get(name)!);
    const out: SetResult[] = [];
    for (const s of sets) out.push(await evaluateSet(ex, data, s, o.evalBatchSize, post));
    return out;
  };
  const majority: Record<string, number> = {}, naiveBayes: Record<string, number> = {};
  for (const s of data.kind === "classification" ? data.evals : []) {
    majority[s.name] = majorityBaseline(s.rows);
    if (data.train.length) naiveBayes[s.name] = naiveBayesAccuracy(data.train, s.rows, data.labels.length);
  }

  try {
    const schedule = {
      base: learningRate,
      warmupProportion: o.warmupProportion,
      totalSteps: steps,
      degree: 1,
    };
    let step = 0;
    const ex: StepExecutor | undefined = train?.executor;
    if (ex) {
      writeOptimizerConstants(ex, layout, schedule, o.gradientAccumulationSteps);
      if (resume) {
        ex.write(OPT.state, writeCheckpointStart(ex, resume, layout));
        step = resume.step;
      } else writeFreshStart(ex, layout, weights!, precision === "fp16" ? o.initLossScale : 1);
    }
    const currentParams = async () =>
      ex
        ? paramsFromFlat(await readFlat(ex, layout, OPT.flatParams), layout)
        : (weights ?? paramsFromFlat([], layout));

    let before: SetResult[] | undefined;
    if (o.doEval && !resume && data.evals.length) {
      before = await evalWith(weights!);
      ev.evaluated?.("before", before);
    }
    await Deno.mkdir(o.outputDir, { recursive: true }); // only now: a run that cannot start leaves nothing
    const stopAt = Math.min(steps, o.stepsThisRun !== undefined ? step + o.stepsThisRun : Infinity);
    await ev.start?.({ step, resumed: resume !== undefined, stopAt: o.doTrain ? stopAt : step });

    const records: FinetuneRecord[] = [];
    let lastCheckpoint: string | undefined;
    let savedAt = step;
    const order = new RowOrder(Math.max(1, data.train.length), o.seed);
    const save = async () => {
      lastCheckpoint = await saveDeviceCheckpoint(ex!, {
        runDir: o.outputDir,
        step,
        graph,
        layout,
        config: model.config,
        head: {
          head,
          tokenizer: tokenizerPart(tok),
          ...(head === "classification" ? { labels: data.labels } : {}),
        },
        schedule,
        seed: o.seed,
        keep: o.keepCheckpoints,
        args: { ...o, maxSteps: steps, learningRate },
        extra: { task: data.task },
      });
      savedAt = step;
      await ev.checkpoint?.(lastCheckpoint, step);
    };
    let stoppedBy: FinetuneResult["stoppedBy"] = "done";
    if (ex) {
      let windowStart = performance.now(), windowSteps = 0;
      const t0 = performance.now();
      const outs = ["loss", ...(data.kind === "classification" ? ["accuracy"] : [])];
      while (step < stopAt) {
        await breathe(); // a synchronous step (reference, CPU backend) never lets a signal in otherwise
        if (ev.stopRequested?.()) {
          stoppedBy = "signal";
          break;
        }
        await launchUpdate(ex, {
          seed: o.seed,
          step,
          accumulationSteps: o.gradientAccumulationSteps,
          feed: (mi) => {
            const feed = batchFeed(
              data.train,
              order,
              step * o.trainBatchSize + mi * micro,
              micro,
              data.seqLen,
              data.kind,
            );
            for (const [name, v] of Object.entries(feed)) ex.write(name, v);
          },
        });
        step++;
        windowSteps++;
        if (step % o.logFreq === 0 || step === stopAt) {
          const [state, ...vals] = await Promise.all([ex.read(OPT.state), ...outs.map((n) => ex.read(n))]);
          const now = performance.now();
          const r: FinetuneRecord = {
            step,
            epoch: (step * o.trainBatchSize) / data.train.length,
            loss: vals[0][0],
            ...(vals[1] ? { accuracy: vals[1][0] } : {}),
            loss_scale: state[STATE.lossScale],
            learning_rate: state[STATE.learningRate],
            grad_norm: state[STATE.gradNorm],
            skipped_steps: state[STATE.skippedSteps],
            optimizer_steps: state[STATE.step],
            seq_per_s: (windowSteps * o.trainBatchSize) / ((now - windowStart) / 1000),
            elapsed_s: (now - t0) / 1000,
          };
          windowStart = now;
          windowSteps = 0;
          records.push(r);
          ev.log?.(r);
        }
        if (step % o.numStepsPerCheckpoint === 0) await save();
      }
      if (stoppedBy !== "signal" && step < steps) stoppedBy = "steps-this-run";
      if (savedAt !== step || !lastCheckpoint) await save();
    }

    // ---- evaluation after training, predictions, eval_results.json ----
    const files: string[] = [];
    let after: SetResult[] | undefined;
    const finished = stoppedBy === "done";
    if (finished && (o.doEval || o.doPredict)) {
      const params = await currentParams();
      if (o.doEval && data.evals.length) {
        after = await evalWith(params);
        ev.evaluated?.("after", after);
        const record: EvalRecord = {
          task: data.task,
          step,
          backend: choice.kind,
          ...(before ? { before: Object.fromEntries(before.map((r) => [r.set, r.metrics])) } : {}),
          after: Object.fromEntries(after.map((r) => [r.set, r.metrics])),
          ...(Object.keys(majority).length ? { majority_baseline: majority } : {}),
          ...(Object.keys(naiveBayes).length ? { naive_bayes_baseline: naiveBayes } : {}),
        };
        files.push(await writeEvalResults(o.outputDir, record));
      }
      if (o.doPredict) {
        const results = data.predicts.every((p) => data.evals.includes(p)) && after
          ? after
          : await evalWith(params, data.predicts);
        for (const r of results) files.push(...await writePredictions(o.outputDir, data, r));
      }
    }
    return {
      outputDir: o.outputDir,
      step,
      totalSteps: steps,
      stoppedBy,
      lastCheckpoint,
      records,
      backend: choice.kind,
      before,
      after,
      majority,
      naiveBayes,
      files,
    };
  } finally {
    train?.executor.destroy();
    evaluator?.executor.destroy();
  }
}

export type { TaskData };
