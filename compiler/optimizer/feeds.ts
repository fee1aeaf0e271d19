/**
 * Host-side values of the optimizer's inputs: the layout tables, the hyperparameters and a fresh state.
 * The trainer writes them once (the graph updates state and moments itself from then on); tests use them
 * to run an optimizer step anywhere.
 */
import { type FlatLayout, layoutTables } from "./layout.ts";
import { OPT, STATE, STATE_SIZE } from "./update.ts";

export interface Schedule {
  /** Peak learning rate. */
  readonly learningRate: number;
  /** Fraction of totalSteps spent warming up linearly from 0. */
  readonly warmupProportion: number;
  readonly totalSteps: number;
  /** Exponent of the polynomial decay after warmup (NVIDIA: 0.5). */
  readonly degree: number;
}

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

export function hparamsVector(s: Schedule): Float32Array {
  return Float32Array.from([s.learningRate, s.warmupProportion, s.totalSteps, s.degree]);
}

/** Inputs for a first step: tables, hyperparameters, zero moments, the given state. */
export function optimizerFeeds(
  layout: FlatLayout,
  schedule: Schedule,
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
