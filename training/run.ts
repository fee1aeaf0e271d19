/**
 * A pre-training run: model, data, compiled step, the loop, logging and checkpoints.
 *
 * The step graph holds the whole update (forward, backward, optimizer, loss scaler, schedule), so the loop
 * only feeds batches and launches; it reads from the device when it logs or checkpoints. Steps here are
 * NVIDIA's global steps: one per train_batch_size sequences (gradient_accumulation_steps micro-batches),
 * counted whether or not the update was skipped for overflow (the schedule counts applied updates only).
 * In phase 2 checkpoint names continue from --phase1-end-step, as in run_pretraining.py.
 */
import { join } from "node:path";
import { buildModelGraph } from "../optimizer/model_graph.ts";
import type { Precision } from "../compiler/training_graph/mixed_precision.ts";
import { openBackend } from "../engine/choose_backend.ts";
import { stateVector } from "../optimizer/feeds.ts";
import { flatLayoutOf } from "../optimizer/flat_layout.ts";
import { OPT, STATE } from "../optimizer/update.ts";
import { BUILT_IN_CORPORA, ensureBrownShards } from "../data/corpus/brown_shards.ts";
import { Loader } from "../data/loader.ts";
import type { Batch } from "../data/loader_batch.ts";
import { loadModel } from "../models/load.ts";
import { loadHfWeights } from "../model_io/hf_checkpoint.ts";
import { initParams } from "../model_io/init_params.ts";
import {
  CheckpointError,
  exists,
  findNewestCheckpoint,
  type LoadedCheckpoint,
  readCheckpoint,
} from "./checkpoint.ts";
import { shardTokenizer } from "./checkpoint_tokenizer.ts";
import { claimRunFolder } from "./run_folder.ts";
import { breathe } from "./signals.ts";
import { verifyIfTrainingCheckpoint } from "./checkpoint.ts";
import { checkModelSize } from "../model_io/size_check.ts";
import { checkTrainOptions, TRAIN_DEFAULTS, type TrainOptions, TrainOptionsError } from "./options.ts";
import {
  flatGroupBudget,
  groupsNote,
  launchUpdate,
  writeCheckpointStart,
  writeFreshStart,
  writeOptimizerConstants,
} from "./device_setup.ts";
import { saveDeviceCheckpoint } from "./device_setup.ts";
import { BATCH_INPUTS, heldOutSplit, targetCounts, unigramLogits } from "../data/heldout.ts";
import { type HeldOutResult, openHeldOut } from "./heldout_eval.ts";
import { paramsFromFlat, readFlat } from "./run_state.ts";

/** One logged step, as a line of metrics.jsonl; at checkpoints and the end, with the held-out figures. */
export interface LogRecord extends Partial<HeldOutResult> {
  step: number;
  loss: number;
  mlm_loss: number;
  nsp_loss: number;
  mlm_accuracy: number;
  nsp_accuracy: number;
  loss_scale: number;
  learning_rate: number;
  grad_norm: number;
  skipped_steps: number;
  optimizer_steps: number;
  seq_per_s: number;
  elapsed_s: number;
}

export interface RunEvents {
  info?(msg: string): void;
  /** Before the first step: the global step the run starts from, and whether it continues a run. */
  start?(s: { step: number; resumed: boolean; stopAt: number; skippedSteps: number }): Promise<void> | void;
  /** Called for every logged step. */
  log?(r: LogRecord): void;
  checkpoint?(dir: string, step: number): Promise<void> | void;
  /** Polled between steps; true stops the run after the step (it is then checkpointed). */
  stopRequested?(): boolean;
}

export interface RunResult {
  readonly outputDir: string;
  /** The global step reached. */
  readonly step: number;
  readonly lastCheckpoint?: string;
  readonly stoppedBy: "max-steps" | "steps-this-run" | "signal";
  readonly records: LogRecord[];
  readonly backend: string;
}

/** Default --max-steps on the reference interpreter (about 8 s a step for BERT-tiny at batch 8). */
export const REFERENCE_MAX_STEPS = 20;

export async function runTraining(o: TrainOptions, ev: RunEvents = {}): Promise<RunResult> {
  checkTrainOptions(o);
  // The output rule first: a folder of someone's files, or one another trainer holds, is refused
  // before any work (and a folder created here is removed again if the run fails before writing).
  const folder = await claimRunFolder(
    o.outputDir,
    "deno task train",
    [o.inputDir, o.initCheckpoint, o.model],
    ev.info,
  );
  try {
    return await runInFolder(o, ev, () => folder.mark("deno task train"));
  } finally {
    await folder.release();
  }
}

async function runInFolder(o: TrainOptions, ev: RunEvents, mark: () => Promise<void>): Promise<RunResult> {
  const info = ev.info ?? (() => {});

  // ---- where to start: a checkpoint of this run, a phase-1 checkpoint, an HF folder, or fresh ----
  const start = await startingPoint(o);
  if (start.resume) info(`resuming from ${start.resume.dir} (step ${start.resume.step})`);

  const model = await loadModel(o.model);
  // A built-in corpus at sequence 64: a demo-sized run that shows learning within minutes even on a
  // CPU-emulated GPU (the MLM head's GEMMs against the 30,522-word vocabulary dominate a small model).
  const corpus = BUILT_IN_CORPORA.find((c) => c === (o.inputDir ?? TRAIN_DEFAULTS.corpus));
  const dataDir = !corpus ? o.inputDir! : await ensureBrownShards({
    corpus,
    maxSeqLength: 64,
    maxPredictionsPerSeq: 10,
    onProgress: (phase, done, total) => info(`preparing the ${corpus} corpus: ${phase} ${done}/${total}`),
  });
  const micro = o.trainBatchSize / o.gradientAccumulationSteps;
  const loaderState = start.resume && !start.newPhase ? start.resume.state.loader : undefined;
  // A user's folder trains on every shard, as before held-out figures existed, unless they are asked for.
  const split = await heldOutSplit(dataDir, corpus !== undefined || (o.heldOutInstances ?? 0) > 0);
  const loader = await Loader.open(dataDir, {
    batchSize: micro,
    shardRange: split.train,
    seed: loaderState ? undefined : o.seed,
    // deno-lint-ignore no-explicit-any
    state: loaderState as any,
  });
  if (loader.manifest.vocab_size > model.config.vocab_size) {
    loader.close();
    throw new TrainOptionsError(
      `${dataDir}: the shards were made with a vocabulary of ${loader.manifest.vocab_size} tokens but ` +
        `${o.model} has vocab_size ${model.config.vocab_size}; their token ids would be out of range`,
    );
  }
  const shardTok = await shardTokenizer(loader.manifest);
  if ("unavailable" in shardTok) info(`checkpoints will carry no tokenizer: ${shardTok.unavailable}`);
  const choice = await openBackend(o.backend);
  // Unless asked, a demo-sized run: minutes on a GPU or lavapipe, and on the CPU interpreter too.
  const maxSteps = o.maxSteps ??
    (choice.kind === "reference" ? REFERENCE_MAX_STEPS : TRAIN_DEFAULTS.maxSteps);
  if (o.maxSteps === undefined && choice.kind === "reference") {
    info(`the CPU interpreter is slow: ${maxSteps} steps unless --max-steps says otherwise`);
  }
  const precision: Precision = o.precision !== "auto" ? o.precision : choice.row.autoPrecision;
  const refusal = choice.refusePrecision(precision);
  if (refusal) throw new TrainOptionsError(refusal);
  checkModelSize(model.config, {
    mode: "train",
    batchSize: micro,
    seqLen: loader.seqLength,
    maxPredictions: loader.maxPredictions,
    what: o.model,
  });
  if (o.initCheckpoint) await verifyIfTrainingCheckpoint(o.initCheckpoint);
  // The device's binding limit cuts the flat vectors into groups (bert-base's 444 MB on WebGPU).
  const maxGroupBytes = flatGroupBudget(choice.limits, o.maxGroupBytes);
  const graph = buildModelGraph({
    model,
    mode: "train",
    precision,
    batchSize: micro,
    seqLen: loader.seqLength,
    maxPredictions: loader.maxPredictions,
    optimizer: {
      kind: o.optimizer,
      weightDecay: o.weightDecay,
      dynamicScale: precision === "fp16" && o.lossScale === undefined,
      accumulationSteps: o.gradientAccumulationSteps,
      maxGroupBytes,
    },
  });
  const layout = flatLayoutOf(graph, undefined, { maxGroupBytes });
  // Compiling takes from seconds to a minute: say so, or the run looks hung.
  info(`compiling the training step (${graph.nodes.length} graph nodes, ${o.fuse ? "fused" : "unfused"})…`);
  const tc = performance.now();
  await breathe(); // let the line out before the synchronous compile
  const { executor: ex, compiled } = await choice.compile(graph, o.fuse);
  info(`compiled in ${((performance.now() - tc) / 1000).toFixed(1)} s`);
  const kernels = compiled?.plan.kernels.length ?? 0;
  const flat = `${(layout.total / 1e6).toFixed(2)}M flat elements`;
  const backend = `backend ${choice.kind} (${choice.why})${kernels ? `, ${kernels} kernels per step` : ""}`;
  const groups = groupsNote(layout.groups.length, maxGroupBytes);
  info(`${model.name} ${precision}: ${layout.segments.length} tensors, ${flat}${groups}; ${backend}`);
  info(
    `data: ${dataDir} (sequence ${loader.seqLength}, ${loader.maxPredictions} predictions, micro-batch ${micro})`,
  );
  // Off by default on the interpreter, whose forward steps take seconds each.
  const limit = o.heldOutInstances ??
    (choice.kind === "reference" || !split.heldOut ? 0 : TRAIN_DEFAULTS.heldOutInstances);
  const token = (id: number) => "tokenizer" in shardTok ? shardTok.tokenizer.tokens[id] : `id ${id}`;
  const counts = await targetCounts(dataDir, split.train);
  const heldOut = await openHeldOut(choice, loader, { ...o, model, precision, limit, split, token, counts });
  if (heldOut) info(`the last shard is held out (up to ${limit} instances scored at checkpoints)`);

  try {
    // ---- initial device state ----
    const schedule = { base: o.learningRate, warmupProportion: o.warmupProportion, totalSteps: maxSteps };
    writeOptimizerConstants(ex, layout, schedule, o.gradientAccumulationSteps);
    const baseStep = o.phase2 ? o.phase1EndStep : 0;
    let step = 0; // global steps of this phase done
    const scale = o.lossScale ?? (precision === "fp16" ? o.initLossScale : 1);
    if (start.resume) {
      const ck = start.resume;
      const saved = writeCheckpointStart(ex, ck, layout);
      if (start.newPhase) {
        // Phase 2 starts its own schedule (NVIDIA resets the optimizer's step) and keeps the moments.
        ex.write(OPT.state, stateVector({ step: 0, lossScale: o.lossScale ?? saved[STATE.lossScale] }));
      } else {
        ex.write(OPT.state, saved);
        step = ck.step - baseStep;
      }
    } else {
      const weights = o.initCheckpoint
        ? await loadHfWeights(graph, o.initCheckpoint)
        : initParams(graph, o.seed);
      if (o.initCheckpoint) info(`initial weights from ${o.initCheckpoint}`);
      else if (o.unigramBias) {
        weights.set("cls.predictions.bias", unigramLogits(counts, model.config.vocab_size));
      }
      writeFreshStart(ex, layout, weights, scale);
    }

    const stopAt = Math.min(maxSteps, o.stepsThisRun !== undefined ? step + o.stepsThisRun : Infinity);
    if (step >= maxSteps) {
      info(`step ${baseStep + step} is already at --max-steps ${maxSteps}; nothing to do`);
    }
    await mark(); // only now: a run that cannot start leaves nothing
    const skippedSteps = start.resume && !start.newPhase
      ? Number((start.resume.state.train_state as Record<string, number> | undefined)?.skippedSteps ?? 0)
      : 0;
    await ev.start?.({
      step: baseStep + step,
      resumed: start.resume !== undefined,
      stopAt: baseStep + stopAt,
      skippedSteps,
    });
    const records: LogRecord[] = [];
    let lastCheckpoint: string | undefined;
    let savedAt = step;
    const save = async () => {
      const globalStep = baseStep + step;
      const dir = await saveDeviceCheckpoint(ex, {
        runDir: o.outputDir,
        step: globalStep,
        graph,
        layout,
        config: { ...model.config, architectures: ["BertForPreTraining"], model_type: "bert" },
        head: { head: "pretraining", tokenizer: "tokenizer" in shardTok ? shardTok.tokenizer : undefined },
        schedule,
        seed: o.seed,
        keep: o.keepCheckpoints,
        args: { ...o, maxSteps },
        extra: { loader: loader.state(), phase: o.phase2 ? 2 : 1 },
      });
      lastCheckpoint = dir;
      savedAt = step;
      await ev.checkpoint?.(dir, globalStep);
    };

    let batch: Batch | undefined;
    let windowStart = performance.now(), windowSteps = 0;
    const t0 = performance.now();
    let stoppedBy: RunResult["stoppedBy"] = step >= maxSteps ? "max-steps" : "steps-this-run";
    while (step < stopAt) {
      await breathe();
      if (ev.stopRequested?.()) {
        stoppedBy = "signal";
        break;
      }
      await launchUpdate(ex, {
        seed: o.seed,
        step: baseStep + step,
        accumulationSteps: o.gradientAccumulationSteps,
        feed: () => {
          batch = loader.next(batch);
          for (const name of BATCH_INPUTS) ex.write(name, batch[name]);
        },
      });
      step++;
      windowSteps++;
      const saveNow = step % o.numStepsPerCheckpoint === 0;
      // A checkpoint with a held-out evaluation is logged even off --log-freq, to carry its figures.
      if (step % o.logFreq === 0 || step === stopAt || (saveNow && heldOut)) {
        const r = await readRecord(ex, baseStep + step);
        r.seq_per_s = (windowSteps * o.trainBatchSize) / ((performance.now() - windowStart) / 1000);
        if (heldOut && (saveNow || step === stopAt)) {
          const params = paramsFromFlat(await readFlat(ex, layout, OPT.flatParams), layout);
          Object.assign(r, await heldOut.evaluate(params));
        }
        // Elapsed counts the evaluation; sequences/s is training alone.
        windowStart = performance.now();
        r.elapsed_s = (windowStart - t0) / 1000;
        windowSteps = 0;
        records.push(r);
        ev.log?.(r);
      }
      if (saveNow) await save();
      if (step >= maxSteps) stoppedBy = "max-steps";
    }
    if (savedAt !== step || !lastCheckpoint) await save();
    return {
      outputDir: o.outputDir,
      step: baseStep + step,
      lastCheckpoint,
      stoppedBy,
      records,
      backend: choice.kind,
    };
  } finally {
    ex.destroy();
    heldOut?.destroy();
    loader.close();
  }
}

async function readRecord(
  ex: { read(n: string): Promise<ArrayLike<number>> },
  step: number,
): Promise<LogRecord> {
  const names = ["loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", OPT.state];
  const [loss, mlm, nsp, mlmAcc, nspAcc, state] = await Promise.all(names.map((n) => ex.read(n)));
  return {
    step,
    loss: loss[0],
    mlm_loss: mlm[0],
    nsp_loss: nsp[0],
    mlm_accuracy: mlmAcc[0],
    nsp_accuracy: nspAcc[0],
    loss_scale: state[STATE.lossScale],
    learning_rate: state[STATE.learningRate],
    grad_norm: state[STATE.gradNorm],
    skipped_steps: state[STATE.skippedSteps],
    optimizer_steps: state[STATE.step],
    seq_per_s: 0,
    elapsed_s: 0,
  };
}

interface Start {
  /** The checkpoint to continue from (this run's newest, or phase 1's last). */
  readonly resume?: LoadedCheckpoint;
  /** The checkpoint is phase 1's: start phase 2 from its weights and moments with a fresh schedule. */
  readonly newPhase: boolean;
}

/**
 * Decides where the run starts, before anything is written: a run that would overwrite checkpoints it
 * was not asked to resume from is refused, and a corrupt checkpoint stops the run with its error.
 */
async function startingPoint(o: TrainOptions): Promise<Start> {
  const newest = await findNewestCheckpoint(o.outputDir);
  const newestStep = newest ? Number(newest.split("ckpt_").pop()) : -1;
  if (o.phase2) {
    if (newest && newestStep > o.phase1EndStep) {
      if (!o.resumeFromCheckpoint) refuse(o.outputDir, newest);
      return { resume: await readCheckpoint(newest), newPhase: false };
    }
    const phase1 = o.initCheckpoint ?? join(o.outputDir, `ckpt_${o.phase1EndStep}`);
    try {
      return { resume: await readCheckpoint(phase1), newPhase: true };
    } catch (e) {
      if (
        o.initCheckpoint && e instanceof CheckpointError && !(await exists(join(phase1, "manifest.json")))
      ) {
        return { newPhase: true }; // a plain Hugging Face folder: weights only, loaded by runTraining
      }
      throw new CheckpointError(`--phase2: cannot start from phase 1's checkpoint: ${(e as Error).message}`);
    }
  }
  if (!newest) {
    if (o.resumeFromCheckpoint) {
      throw new CheckpointError(`${o.outputDir}: no complete checkpoint to resume from`);
    }
    return { newPhase: false };
  }
  if (!o.resumeFromCheckpoint) refuse(o.outputDir, newest);
  return { resume: await readCheckpoint(newest), newPhase: false };
}

function refuse(dir: string, newest: string): never {
  throw new CheckpointError(
    `${dir} already has checkpoints (newest ${newest}); pass --resume-from-checkpoint to continue that ` +
      `run, or choose another --output-dir (nothing was overwritten)`,
  );
}
