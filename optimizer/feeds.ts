/**
 * Host-side values of the optimizer's inputs: the layout tables, the hyperparameters and a fresh state.
 * The trainer writes them once (the graph updates state and moments itself from then on); tests use them
 * to run an optimizer step anywhere.
 */
import { type FlatLayout, layoutTables } from "./flat_layout.ts";
import { groupName, OPT, STATE, STATE_SIZE } from "./update.ts";

/** The flat vectors a layout cuts into groups: each is one logical vector of layout.total on the host. */
export type FlatName = typeof OPT.flatParams | typeof OPT.m | typeof OPT.v | typeof OPT.gradAcc;

/** The graph names of a flat vector's groups, in order (one name, unchanged, with one group). */
export function flatNames(layout: FlatLayout, base: FlatName): string[] {
  return layout.groups.map((_, gi) => groupName(base, layout, gi));
}

/**
 * A logical flat vector (layout.total values, global offsets) as the feeds of its groups: views, not
 * copies, where `flat` is already a Float32Array.
 */
export function splitFlat(
  layout: FlatLayout,
  base: FlatName,
  flat: ArrayLike<number>,
): Record<string, Float32Array> {
  if (flat.length !== layout.total) {
    throw new Error(`flat vector '${base}': ${flat.length} values, the layout has ${layout.total}`);
  }
  const f = flat instanceof Float32Array ? flat : Float32Array.from(flat);
  return Object.fromEntries(
    layout.groups.map((
      grp,
      gi,
    ) => [groupName(base, layout, gi), f.subarray(grp.offset, grp.offset + grp.total)]),
  );
}

/** The logical flat vector from its groups' values (in group order), the inverse of splitFlat. */
export function joinFlat(layout: FlatLayout, parts: readonly ArrayLike<number>[]): Float32Array {
  if (parts.length === 1 && parts[0] instanceof Float32Array && parts[0].length === layout.total) {
    return parts[0];
  }
  const out = new Float32Array(layout.total);
  layout.groups.forEach((grp, gi) => {
    if (parts[gi]?.length !== grp.total) {
      throw new Error(`flat group ${gi}: ${parts[gi]?.length} values, the layout has ${grp.total}`);
    }
    out.set(parts[gi], grp.offset);
  });
  return out;
}

/** The layout tables of every group, by graph name (written once; see appendOptimizer). */
export function tableFeeds(layout: FlatLayout): Record<string, Int32Array> {
  const out: Record<string, Int32Array> = {};
  layout.groups.forEach((grp, gi) => {
    const { segments, chunkSegment } = layoutTables(layout, grp);
    out[groupName(OPT.segments, layout, gi)] = segments;
    out[groupName(OPT.chunkSegment, layout, gi)] = chunkSegment;
  });
  return out;
}

/**
 * NVIDIA's PolyWarmUpScheduler: linear warmup to `base`, then polynomial decay. The device computes it
 * (optimizer/update.ts); training/schedule.ts is the same function on the host.
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

/** Inputs for a first step: tables, hyperparameters, zero moments (every group's), the given state. */
export function optimizerFeeds(
  layout: FlatLayout,
  schedule: ScheduleOptions,
  state: TrainState,
): Record<string, Float32Array | Int32Array> {
  return {
    [OPT.state]: stateVector(state),
    [OPT.hparams]: hparamsVector(schedule),
    ...tableFeeds(layout),
    ...splitFlat(layout, OPT.m, new Float32Array(layout.total)),
    ...splitFlat(layout, OPT.v, new Float32Array(layout.total)),
  };
}
