/**
 * A few training steps of the small HF fixture BERT through the trainer's own device code
 * (training/device_setup.ts: constants, fresh start, launchUpdate, checkpoint save and resume), with the
 * optimizer's flat vectors in one group or cut into several (optimizer/flat_layout.ts). Shared by the
 * reference-interpreter and WebGPU tests of parameter groups; `open` loads a graph into an executor.
 */
import { BATCH_INPUTS } from "../../data/heldout.ts";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import { type FlatLayout, flatLayoutOf } from "../../optimizer/flat_layout.ts";
import { OPT, type OptimizerKind, STATE } from "../../optimizer/update.ts";
import type { Graph } from "../../ir/mod.ts";
import { defineBert } from "../../models/bert.ts";
import { readBertConfig } from "../../models/bert_config.ts";
import { initParams } from "../../model_io/init_params.ts";
import type { StepExecutor } from "../../runtime/backend.ts";
import { readCheckpoint } from "../../training/checkpoint.ts";
import {
  launchUpdate,
  saveDeviceCheckpoint,
  writeCheckpointStart,
  writeFreshStart,
  writeOptimizerConstants,
} from "../../training/device_setup.ts";
import { type DeviceState, readDeviceState } from "../../training/run_state.ts";
import { seededRandom } from "../../cases/random.ts";
import { batchFeeds } from "../../cases/bert_feeds.ts";

export const CONFIG = readBertConfig(
  new URL("../fixtures/hf-tiny/pretraining/config.json", import.meta.url).pathname,
);
const SHAPE = { batch: 2, seq: 16, predictions: 3, vocab: CONFIG.vocab_size };
const SCHEDULE = { base: 0.01, warmupProportion: 0.25, totalSteps: 8 };

/** The fixture's training graph and its layout, cut by `maxGroupBytes` (one group when absent). */
export function groupedGraph(
  kind: OptimizerKind,
  maxGroupBytes?: number,
  accumulationSteps = 1,
): { graph: Graph; layout: FlatLayout } {
  const graph = buildModelGraph({
    model: defineBert("groups-fixture", CONFIG),
    mode: "train",
    precision: "fp32",
    batchSize: SHAPE.batch / accumulationSteps,
    seqLen: SHAPE.seq,
    maxPredictions: SHAPE.predictions,
    optimizer: { kind, maxGroupBytes, accumulationSteps },
  });
  return { graph, layout: flatLayoutOf(graph, undefined, { maxGroupBytes }) };
}

/** A budget that cuts the fixture's flat vector into about `parts` groups (the largest tensor still fits). */
export function budgetFor(layout: FlatLayout, parts: number): number {
  const largest = Math.max(...layout.segments.map((s) => s.chunks * layout.chunk * 4));
  return Math.max(largest, Math.ceil((layout.total * 4) / parts));
}

export interface Session {
  readonly ex: StepExecutor;
  readonly graph: Graph;
  readonly layout: FlatLayout;
  /** Global steps done. */
  step: number;
}

/** Loads the graph, writes the optimizer's constants and fresh weights (seeded). */
export async function start(
  open: (g: Graph) => Promise<StepExecutor>,
  kind: OptimizerKind,
  maxGroupBytes: number | undefined,
  seed: number,
  accumulationSteps = 1,
): Promise<Session> {
  const { graph, layout } = groupedGraph(kind, maxGroupBytes, accumulationSteps);
  const ex = await open(graph);
  writeOptimizerConstants(ex, layout, SCHEDULE, accumulationSteps);
  writeFreshStart(ex, layout, initParams(graph, seed), 1);
  return { ex, graph, layout, step: 0 };
}

/** `n` optimizer updates on batches drawn from (seed, step): the same data whatever the grouping. */
export async function steps(s: Session, n: number, seed: number, accumulationSteps = 1): Promise<void> {
  for (let i = 0; i < n; i++) {
    const r = seededRandom(seed * 1000 + s.step);
    await launchUpdate(s.ex, {
      seed,
      step: s.step,
      accumulationSteps,
      feed: () => {
        const f = batchFeeds(s.graph, { ...SHAPE, batch: SHAPE.batch / accumulationSteps }, r, 0);
        for (const name of BATCH_INPUTS) s.ex.write(name, f[name]);
      },
    });
    s.step++;
  }
}

/** What a checkpoint holds, read from the device through the groups: the logical vectors and the state. */
export interface Vectors {
  readonly flatParams: Float32Array;
  readonly m: Float32Array;
  readonly v: Float32Array;
  readonly state: Float32Array;
}

export async function deviceState(s: Session): Promise<Vectors> {
  const d: DeviceState = await readDeviceState(s.ex, s.layout);
  const moment = (name: string) => {
    const t = d.optimizer.get(name);
    if (!(t instanceof Float32Array)) throw new Error(`no flat '${name}' read from the device`);
    return t;
  };
  return { flatParams: d.flatParams, m: moment(OPT.m), v: moment(OPT.v), state: d.state };
}

/** Saves `ckpt_<step>` into `runDir` as the trainer does; returns its folder. */
export function save(s: Session, runDir: string, seed: number): Promise<string> {
  return saveDeviceCheckpoint(s.ex, {
    runDir,
    step: s.step,
    graph: s.graph,
    layout: s.layout,
    config: { ...CONFIG, architectures: ["BertForPreTraining"], model_type: "bert" },
    schedule: SCHEDULE,
    seed,
    keep: 3,
    extra: {},
  });
}

/** Writes a checkpoint back into a session (any grouping: the checkpoint holds the logical vectors). */
export async function resume(s: Session, dir: string): Promise<void> {
  const ck = await readCheckpoint(dir);
  s.ex.write(OPT.state, writeCheckpointStart(s.ex, ck, s.layout));
  s.step = ck.step;
}

/** Largest |a - b| over max|b|: a scale-aware distance between two flat vectors (moments are tiny). */
export function relativeGap(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`lengths ${a.length} and ${b.length} differ`);
  let gap = 0, scale = 1e-30;
  for (let i = 0; i < a.length; i++) {
    gap = Math.max(gap, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return gap / scale;
}

export { STATE };
