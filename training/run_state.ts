/**
 * What a checkpoint holds beyond the weights, and moving it between a checkpoint and a device: the flat
 * moments, the on-device training state (update count, loss scale and its clean-step counter, skipped
 * steps), the loader position, the seed and the layout the flat vectors follow (checked on resume, since
 * moments are meaningless under another layout).
 */
import { type FlatName, flatNames, joinFlat, splitFlat } from "../optimizer/feeds.ts";
import { type FlatLayout, flatLayout } from "../optimizer/flat_layout.ts";
import { OPT, STATE } from "../optimizer/update.ts";
import type { StepExecutor } from "../runtime/backend.ts";
import { CheckpointError, type LoadedCheckpoint, type OptimizerTensor } from "./checkpoint.ts";

export interface LayoutRecord {
  readonly total: number;
  readonly chunk: number;
  /** name:size, in order. */
  readonly tensors: readonly string[];
}

export function layoutRecord(layout: FlatLayout): LayoutRecord {
  return {
    total: layout.total,
    chunk: layout.chunk,
    tensors: layout.segments.map((s) => `${s.name}:${s.size}`),
  };
}

/**
 * Checks a checkpoint's layout against the run's and returns how to read its flat moments in the run's
 * layout. The same tensors in the same order are the same model; the chunk size (and with it each tensor's
 * padded offset) may differ, as between versions that chose other chunks, and then each tensor's range is
 * moved to its offset here. Anything else throws.
 */
export function checkLayout(dir: string, saved: unknown, layout: FlatLayout): SavedLayout {
  const want = layoutRecord(layout);
  const got = saved as LayoutRecord | undefined;
  const sameTensors = got && Array.isArray(got.tensors) && got.tensors.length === want.tensors.length &&
    got.tensors.every((t, i) => t === want.tensors[i]);
  const savedLayout = sameTensors ? layoutWithChunk(layout, got.chunk) : undefined;
  if (!savedLayout || savedLayout.total !== got!.total) {
    const saved = `${got?.tensors?.length ?? "?"} tensors, ${got?.total ?? "?"} elements`;
    throw new CheckpointError(
      `${dir}: its optimizer state is laid out for another model (${saved}; this model has ` +
        `${want.tensors.length} tensors, ${want.total} elements)`,
    );
  }
  if (got!.chunk === want.chunk) return { total: want.total, inLayout: (flat) => flat };
  return {
    total: savedLayout.total,
    inLayout: (flat) => {
      const out = new Float32Array(layout.total);
      layout.segments.forEach((s, i) => {
        const from = savedLayout.segments[i].offset;
        out.set(flat.subarray(from, from + s.size), s.offset);
      });
      return out;
    },
  };
}

/** A checkpoint's flat layout: its length, and its flat vectors moved into the run's layout. */
export interface SavedLayout {
  readonly total: number;
  readonly inLayout: (flat: Float32Array) => Float32Array;
}

/** The run's tensors laid out with a checkpoint's `chunk` (layout.ts's rule), or undefined if it is no chunk size. */
function layoutWithChunk(layout: FlatLayout, chunk: unknown): FlatLayout | undefined {
  if (typeof chunk !== "number") return undefined;
  try {
    return flatLayout(layout.segments, chunk);
  } catch {
    return undefined; // flatLayout refuses a chunk that is not a power of two of at least 64 elements
  }
}

/** The parameters, one Float32Array each, cut out of the flat parameter vector. */
export function paramsFromFlat(flat: ArrayLike<number>, layout: FlatLayout): Map<string, Float32Array> {
  const f = flat instanceof Float32Array ? flat : Float32Array.from(flat);
  return new Map(layout.segments.map((s) => [s.name, f.slice(s.offset, s.offset + s.size)]));
}

/** The flat parameter vector (zero padding) from per-parameter values. */
export function flatFromParams(params: Map<string, ArrayLike<number>>, layout: FlatLayout): Float32Array {
  const flat = new Float32Array(layout.total);
  for (const s of layout.segments) {
    const v = params.get(s.name);
    if (!v) throw new CheckpointError(`no value for parameter '${s.name}'`);
    if (v.length !== s.size) {
      throw new CheckpointError(`parameter '${s.name}' has ${v.length} values, the model wants ${s.size}`);
    }
    flat.set(v, s.offset);
  }
  return flat;
}

export interface DeviceState {
  readonly flatParams: Float32Array;
  readonly optimizer: Map<string, OptimizerTensor>;
  /** train.state as stored (update count, loss scale, ...). */
  readonly state: Float32Array;
}

const asF32 = (x: ArrayLike<number>) => (x instanceof Float32Array ? x : Float32Array.from(x));

/**
 * Writes a logical flat vector (parameters, a moment, the accumulator: layout.total values) to the device,
 * into every group's vector; callers need not know how many groups the device's limits made.
 */
export function writeFlat(
  ex: StepExecutor,
  layout: FlatLayout,
  base: FlatName,
  flat: ArrayLike<number>,
): void {
  for (const [name, part] of Object.entries(splitFlat(layout, base, flat))) ex.write(name, part);
}

/**
 * Reads a logical flat vector back from all its groups. Group after group, so that only one group's
 * staging copy exists at a time (bert-large's vector is 1.4 GB; reading its 11 groups at once would
 * double the host memory a checkpoint needs).
 */
export async function readFlat(ex: StepExecutor, layout: FlatLayout, base: FlatName): Promise<Float32Array> {
  const names = flatNames(layout, base);
  if (names.length === 1) return joinFlat(layout, [asF32(await ex.read(names[0]))]);
  const out = new Float32Array(layout.total);
  for (const [gi, name] of names.entries()) {
    const part = await ex.read(name);
    const grp = layout.groups[gi];
    if (part.length !== grp.total) {
      throw new Error(`'${name}': ${part.length} values read, the layout's group has ${grp.total}`);
    }
    out.set(part, grp.offset);
  }
  return out;
}

/** Reads everything a checkpoint needs from the device. */
export async function readDeviceState(ex: StepExecutor, layout: FlatLayout): Promise<DeviceState> {
  const [flat, m, v, state] = await Promise.all([
    readFlat(ex, layout, OPT.flatParams),
    readFlat(ex, layout, OPT.m),
    readFlat(ex, layout, OPT.v),
    ex.read(OPT.state),
  ]);
  return {
    flatParams: flat,
    optimizer: new Map([[OPT.m, m], [OPT.v, v]]),
    state: asF32(state),
  };
}

/**
 * Writes a checkpoint's moments to the device (the weights go separately), moved from the checkpoint's
 * layout (checkLayout) into the run's.
 */
export function restoreOptimizer(
  ex: StepExecutor,
  ck: LoadedCheckpoint,
  layout: FlatLayout,
  saved: SavedLayout,
): void {
  for (const name of [OPT.m, OPT.v] as const) {
    const t = ck.optimizer.get(name);
    if (!t) throw new CheckpointError(`${ck.dir}: optimizer.safetensors has no '${name}'`);
    if (t.length !== saved.total) {
      throw new CheckpointError(
        `${ck.dir}: '${name}' has ${t.length} values, the layout wants ${saved.total}`,
      );
    }
    writeFlat(ex, layout, name, saved.inLayout(asF32(t)));
  }
}

/** The scalar part of train.state, as plain JSON for trainer_state.json. */
export function stateRecord(state: Float32Array): Record<string, number> {
  return Object.fromEntries(Object.entries(STATE).map(([k, i]) => [k, state[i]]));
}
