/**
 * What every training loop does with the device around its steps, shared by pre-training (run.ts) and
 * fine-tuning (finetune/loop.ts): write the optimizer's constant inputs, start from fresh weights or from
 * a checkpoint, launch one update (its micro-batches, with the dropout key that makes resume exact), and
 * read the device back into a checkpoint.
 */
import { isAbsolute, relative } from "node:path";
import type { Graph } from "../ir/mod.ts";
import { hparamsVector, type ScheduleOptions, stateVector, tableFeeds } from "../optimizer/feeds.ts";
import type { FlatLayout } from "../optimizer/flat_layout.ts";
import { OPT, STATE } from "../optimizer/update.ts";
import type { HfHeadParts } from "../model_io/hf_head_files.ts";
import type { BackendLimits } from "../engine/backend_row.ts";
import type { StepExecutor } from "../runtime/backend.ts";
import { CheckpointError, type LoadedCheckpoint, writeCheckpoint } from "./checkpoint.ts";
import {
  checkLayout,
  flatFromParams,
  layoutRecord,
  paramsFromFlat,
  readDeviceState,
  restoreOptimizer,
  stateRecord,
  writeFlat,
} from "./run_state.ts";

/**
 * The most bytes one group of the optimizer's flat vectors may take on this backend: what one kernel may
 * bind and one buffer may hold (WebGPU; CUDA and the CPU say nothing: one group), or less where asked.
 */
export function flatGroupBudget(limits: BackendLimits, forced?: number): number | undefined {
  const caps = [limits.maxStorageBindingBytes, limits.maxBufferBytes, forced].filter((x) => x !== undefined);
  return caps.length ? Math.min(...caps) : undefined;
}

/** For the run's first lines: how many groups the flat vectors make, when more than one. */
export function groupsNote(groups: number, budget: number | undefined): string {
  return groups > 1 ? ` in ${groups} groups of at most ${((budget ?? 0) / 2 ** 20).toFixed(0)} MiB` : "";
}

/** The layout tables and schedule (written once), and a zero accumulator when updates accumulate. */
export function writeOptimizerConstants(
  ex: StepExecutor,
  layout: FlatLayout,
  schedule: ScheduleOptions,
  accumulationSteps: number,
): void {
  for (const [name, table] of Object.entries(tableFeeds(layout))) ex.write(name, table);
  ex.write(OPT.hparams, hparamsVector(schedule));
  if (accumulationSteps > 1) writeFlat(ex, layout, OPT.gradAcc, new Float32Array(layout.total));
}

/** A first step: these weights, zero moments, no updates yet, the given loss scale. */
export function writeFreshStart(
  ex: StepExecutor,
  layout: FlatLayout,
  weights: Map<string, ArrayLike<number>>,
  lossScale: number,
): void {
  writeFlat(ex, layout, OPT.flatParams, flatFromParams(weights, layout));
  writeFlat(ex, layout, OPT.m, new Float32Array(layout.total));
  writeFlat(ex, layout, OPT.v, new Float32Array(layout.total));
  ex.write(OPT.state, stateVector({ step: 0, lossScale }));
}

/** Weights and moments from a checkpoint of this layout; returns its saved train.state vector. */
export function writeCheckpointStart(
  ex: StepExecutor,
  ck: LoadedCheckpoint,
  layout: FlatLayout,
): Float32Array {
  const saved = checkLayout(ck.dir, ck.state.layout, layout);
  writeFlat(ex, layout, OPT.flatParams, flatFromParams(ck.model, layout));
  restoreOptimizer(ex, ck, layout, saved);
  return decodeState(ck.state.device_state, ck.dir);
}

/**
 * The device's state vector as JSON. A step skipped for fp16 overflow leaves a NaN gradient norm in it,
 * a normal state that must checkpoint and resume exactly, and JSON has no NaN: non-finite values are
 * written as the strings "NaN", "Infinity" and "-Infinity". Finite f32 values round-trip exactly.
 */
export function encodeState(state: ArrayLike<number>): (number | string)[] {
  return Array.from(state, (x) => (Number.isFinite(x) ? x : String(x)));
}

const NON_FINITE: Record<string, number> = { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity };

/** The inverse of encodeState; anything else is a CheckpointError naming the checkpoint. */
export function decodeState(saved: unknown, dir: string): Float32Array {
  const ok = Array.isArray(saved) &&
    saved.every((x) =>
      (typeof x === "number" && Number.isFinite(x)) || (typeof x === "string" && x in NON_FINITE)
    );
  if (!ok) throw new CheckpointError(`${dir}: trainer_state.json has no valid device_state`);
  return Float32Array.from(saved as (number | string)[], (x) => (typeof x === "number" ? x : NON_FINITE[x]));
}

export interface UpdateOptions {
  seed: number;
  /** Global steps done before this one (counted across phases). */
  step: number;
  accumulationSteps: number;
  /** Writes micro-batch `micro`'s data inputs. */
  feed(micro: number): void;
}

/** One optimizer update: its micro-batches, the last one applying the summed gradient. */
export async function launchUpdate(ex: StepExecutor, u: UpdateOptions): Promise<void> {
  for (let mi = 0; mi < u.accumulationSteps; mi++) {
    u.feed(mi);
    // Dropout's Philox key: (seed, micro-batch number), so a resumed run draws the same masks.
    ex.write("rng_key", [u.seed >>> 0, u.step * u.accumulationSteps + mi]);
    if (u.accumulationSteps > 1) ex.write(OPT.apply, [mi === u.accumulationSteps - 1 ? 1 : 0]);
    await ex.step();
  }
}

export interface SaveOptions {
  runDir: string;
  step: number;
  graph: Graph;
  layout: FlatLayout;
  /** config.json contents. */
  config: object;
  /** The head, its labels and the tokenizer, for the Hugging Face files beside the weights. */
  head?: HfHeadParts;
  schedule: ScheduleOptions;
  seed: number;
  keep: number;
  /** The run's options, recorded as portableArgs() makes them. */
  args?: object;
  /** The rest of trainer_state.json (loader position, task, ...). */
  extra: Record<string, unknown>;
}

/** Options that name a file or folder (train's and finetune's). */
const PATH_ARGS = new Set(
  "model inputDir outputDir initCheckpoint configFile vocabFile trainFile predictFile dataDir"
    .split(" "),
);

/**
 * The options as trainer_state.json records them: undefined ones dropped, paths relative to the run
 * folder, so a shared checkpoint does not carry the paths of the machine it was made on (issue 28).
 * They are for the record: resume reads the loader, schedule and device state, never these.
 */
export function portableArgs(args: object, runDir: string): Record<string, unknown> {
  const path = (k: string, v: unknown) => typeof v === "string" && (PATH_ARGS.has(k) || isAbsolute(v));
  return JSON.parse(JSON.stringify(args, (k, v) => path(k, v) ? relative(runDir, v) || "." : v));
}

/** Reads weights, moments and state from the device (one sync) and writes `ckpt_<step>/`. */
export async function saveDeviceCheckpoint(ex: StepExecutor, s: SaveOptions): Promise<string> {
  const dev = await readDeviceState(ex, s.layout);
  const { dir } = await writeCheckpoint(s.runDir, s.step, {
    model: {
      graph: s.graph,
      config: s.config,
      weights: paramsFromFlat(dev.flatParams, s.layout),
      ...(s.head ? { head: s.head } : {}),
    },
    optimizer: dev.optimizer,
    state: {
      loader: null,
      ...s.extra,
      args: portableArgs(s.args ?? {}, s.runDir),
      step: s.step,
      optimizerStep: dev.state[STATE.step],
      lossScaler: { scale: dev.state[STATE.lossScale], cleanSteps: dev.state[STATE.cleanSteps] },
      schedule: s.schedule,
      rng: { seed: s.seed },
      layout: layoutRecord(s.layout),
      device_state: encodeState(dev.state),
      train_state: Object.fromEntries(
        Object.entries(stateRecord(dev.state)).map(([k, v]) => [k, Number.isFinite(v) ? v : String(v)]),
      ),
    },
  }, { keep: s.keep });
  return dir;
}
