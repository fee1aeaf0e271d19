/**
 * Where fine-tuning starts: the model configuration and weights from --init-checkpoint (our checkpoint,
 * a run folder's newest checkpoint, or a Hugging Face model folder), by default the newest `deno task
 * train` checkpoint under out/runs/, else a fresh BERT-tiny.
 *
 * A checkpoint saved for this task's head (same head, same number of labels) loads whole. One saved for
 * pre-training, or a bare BertModel, gives the encoder and the pooler; the task head (and a pooler the
 * file lacks) is freshly initialised, and the run says so in one line. A checkpoint with another task's
 * head is refused: its head cannot be used, and silently dropping it hides a wrong --init-checkpoint.
 * With `rms` (--init-weight-rms) each weight matrix from the file is scaled to that RMS: docs/finetune.md.
 */
import { join } from "node:path";
import type { Graph, Node } from "../../ir/mod.ts";
import { CheckpointError, mapHfTensors } from "../../model_io/hf_checkpoint.ts";
import { initParams } from "../../model_io/init_params.ts";
import { readSafetensorsFile } from "../../model_io/safetensors.ts";
import { type BertConfig, readBertConfig } from "../../models/bert_config.ts";
import { exists, findNewestCheckpoint } from "../checkpoint.ts";
import type { TaskKind } from "./tasks.ts";

export interface StartFolder {
  /** The folder holding config.json and model.safetensors, or undefined for a fresh model. */
  dir?: string;
  /** Why this one (for the log). */
  why: string;
}

/** Resolves --init-checkpoint (a checkpoint folder, or a run folder: its newest checkpoint). */
export async function resolveStart(
  initCheckpoint: string | undefined,
  runsDir = "out/runs",
): Promise<StartFolder> {
  if (initCheckpoint !== undefined) {
    if (await exists(join(initCheckpoint, "config.json"))) {
      return { dir: initCheckpoint, why: "--init-checkpoint" };
    }
    const newest = await findNewestCheckpoint(initCheckpoint).catch(() => undefined);
    if (newest) return { dir: newest, why: `newest checkpoint of --init-checkpoint ${initCheckpoint}` };
    throw new CheckpointError(
      `${initCheckpoint}: neither a model folder (config.json + model.safetensors) nor a run folder with checkpoints`,
    );
  }
  let best: { dir: string; mtime: number } | undefined;
  try {
    for await (const e of Deno.readDir(runsDir)) {
      if (!e.isDirectory) continue;
      const ck = await findNewestCheckpoint(join(runsDir, e.name)).catch(() => undefined);
      if (!ck) continue;
      const mtime = (await Deno.stat(join(ck, "manifest.json"))).mtime?.getTime() ?? 0;
      if (!best || mtime > best.mtime) best = { dir: ck, mtime };
    }
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  if (best) return { dir: best.dir, why: `the newest deno task train checkpoint under ${runsDir}` };
  return { why: `no deno task train checkpoint under ${runsDir}: starting from a fresh BERT-tiny` };
}

export function readStartConfig(dir: string): BertConfig {
  return readBertConfig(join(dir, "config.json"));
}

const isHeadParam = (name: string) => name.startsWith("classifier.") || name.startsWith("qa_outputs.");

/** The head a file's tensors were saved for. */
function fileHead(
  names: string[],
): { kind: "classification" | "qa" | "pretraining" | "bare"; labels?: number } {
  if (names.includes("classifier.weight")) return { kind: "classification" };
  if (names.includes("qa_outputs.weight")) return { kind: "qa" };
  if (names.some((n) => n.startsWith("cls."))) return { kind: "pretraining" };
  return { kind: "bare" };
}

/**
 * The weights for `g` (the task graph) from `dir`, and a line saying what was initialised fresh (or
 * undefined when the checkpoint covered everything).
 */
export async function loadStartWeights(
  g: Graph,
  dir: string,
  kind: TaskKind,
  seed: number,
  rms?: number,
): Promise<{ weights: Map<string, Float32Array>; note?: string }> {
  const file = join(dir, "model.safetensors");
  if (!(await exists(file))) {
    throw new CheckpointError(`${file}: not found (a model folder holds config.json and model.safetensors)`);
  }
  const { tensors } = await readSafetensorsFile(file);
  const names = [...tensors.keys()];
  const has = fileHead(names);
  const want = kind === "qa" ? "qa" : "classification";
  if (has.kind === want) {
    const shape = tensors.get("classifier.weight")?.shape;
    const params = g.sources("param");
    const need = params.get("classifier.weight")?.type.shape;
    if (want === "classification" && shape && need && shape[0] !== need[0]) {
      const fix = "(fine-tune from the encoder: use the pre-training checkpoint it came from)";
      throw new CheckpointError(
        `${file}: its classifier has ${shape[0]} outputs, this task needs ${need[0]} ${fix}`,
      );
    }
    return { weights: scaledToRms(g, mapHfTensors(g, tensors, file), rms) };
  }
  if (has.kind === "classification" || has.kind === "qa") {
    const say = { classification: "sequence-classification", qa: "question-answering" };
    const fix = "(start from a pre-training or BertModel checkpoint)";
    throw new CheckpointError(
      `${file}: holds a ${say[has.kind]} head, but --task needs a ${say[want]} head ${fix}`,
    );
  }
  // Pre-training or bare BertModel: the encoder (and pooler, when present) from the file, the rest fresh.
  const fresh = initParams(g, seed);
  const bare = has.kind === "bare";
  const inFile = (p: string) => tensors.has(p) || (bare && tensors.has(p.replace(/^bert\./, "")));
  const keep = new Map<string, Node>();
  for (const [name, node] of g.sources("param")) {
    if (isHeadParam(name) || (name.startsWith("bert.pooler.") && !inFile(name))) continue;
    keep.set(name, node);
  }
  const keepNames = new Set([...keep.keys()].flatMap((n) => [n, n.replace(/^bert\./, "")]));
  const oldLn = (n: string) =>
    n.replace(/LayerNorm\.gamma$/, "LayerNorm.weight").replace(/LayerNorm\.beta$/, "LayerNorm.bias");
  // Only the tensors the encoder uses: the pre-training head's (cls.*) and a pooler QA has no use for go.
  const encoderTensors = new Map([...tensors].filter(([n]) => keepNames.has(oldLn(n))));
  // mapHfTensors reads nothing of a graph but its parameters; a view with only the encoder's.
  const encoderView = { sources: () => keep } as unknown as Graph;
  const loaded = mapHfTensors(encoderView, encoderTensors, file);
  for (const [n, v] of scaledToRms(g, loaded, rms)) fresh.set(n, v);
  const freshNames = [...fresh.keys()].filter((n) => !loaded.has(n));
  const what = kind === "qa"
    ? "question-answering head (qa_outputs)"
    : `classifier (${kind === "regression" ? "one output, regression" : "classes"})`;
  return {
    weights: fresh,
    note:
      `${dir} is a ${bare ? "bare BertModel" : "pre-training"} checkpoint: a freshly initialised ${what}` +
      (freshNames.some((n) => n.startsWith("bert.pooler.")) ? " and pooler" : ""),
  };
}

/**
 * Each weight matrix (embeddings, projections, pooler) scaled to RMS `rms`; biases and LayerNorm kept. Short
 * pre-training doubles BERT-tiny's weights, halving a fixed Adam step's relative size: Ash & Adams 2020's shrink.
 */
function scaledToRms(g: Graph, w: Map<string, Float32Array>, rms?: number): Map<string, Float32Array> {
  for (const [name, v] of rms === undefined ? [] : w) {
    const meanSquare = v.reduce((a, x) => a + x * x, 0) / v.length;
    if (g.sources("param").get(name)?.type.shape.length === 2 && meanSquare > 0) {
      w.set(name, v.map((x) => x * rms! / Math.sqrt(meanSquare)));
    }
  }
  return w;
}
