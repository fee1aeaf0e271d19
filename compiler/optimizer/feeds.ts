/**
 * Host-side values of the optimizer's inputs: the layout tables, the hyperparameters and a fresh state.
 * The trainer writes them once (the graph updates state and moments itself from then on); tests use them
 * to run an optimizer step anywhere.
 */
import { type FlatLayout, layoutTables } from "./layout.ts";
import { OPT, STATE, STATE_SIZE } from "./update.ts";

/**
 * NVIDIA's PolyWarmUpScheduler: linear warmup to `base`, then polynomial decay. The device computes it
 * (compiler/optimizer/update.ts); training/schedule.ts is the same function on the host.
 */
export interface ScheduleOptions {
  /** Peak learning rate (`--learning-rate`). */
  readonly base: number;
  /** Fraction of totalSteps spent warming up, in [0, 1) (`--warmup-proportion`). */
  readonly warmupProportion: number;
  /** Optimizer updates in the run (`--max-steps`). */
  readonly totalSteps: number;
  /** Power of the decay; default DEFAULT_DEGREE. */
  readonly degree?: number;
}

/** NVIDIA's PolyWarmUpScheduler default. */
export const DEFAULT_DEGREE = 0.5;

export interface TrainState {
  readonly step: number;
  readonly lossScale: number;
  readonly cleanSteps?: number;
  readonly skippedSteps?: number;
}

export function stateVector(s: TrainState): Float32Array {
  const v = new Float32Array(STATE_SIZE);
  v[STATE.step] = s.step;
  v[STATE.lossScale] = s.lossScale;
  v[STATE.cleanSteps] = s.cleanSteps ?? 0;
  v[STATE.skippedSteps] = s.skippedSteps ?? 0;
  return v;
}

export function hparamsVector(s: ScheduleOptions): Float32Array {
  return Float32Array.from([s.base, s.warmupProportion, s.totalSteps, s.degree ?? DEFAULT_DEGREE]);
}

/** Inputs for a first step: tables, hyperparameters, zero moments, the given state. */
export function optimizerFeeds(
  layout: FlatLayout,
  schedule: ScheduleOptions,
  state: TrainState,
): Record<string, Float32Array | Int32Array> {
  const { segments, chunkSegment } = layoutTables(layout);
  return {
    [OPT.state]: stateVector(state),
    [OPT.hparams]: hparamsVector(schedule),
    [OPT.segments]: segments,
    [OPT.chunkSegment]: chunkSegment,
    [OPT.m]: new Float32Array(layout.total),
    [OPT.v]: new Float32Array(layout.total),
  };
}
