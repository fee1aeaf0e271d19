/**
 * Hugging Face checkpoints: a folder with `config.json` and `model.safetensors` whose tensor names are
 * those of BertForPreTraining, BertForSequenceClassification or BertForQuestionAnswering. Our graphs use
 * the same names for their parameters, so mapping is one to one, except for what real checkpoints vary
 * in: the old LayerNorm spelling (`gamma`/`beta`), the MLM decoder weight (tied to the word embeddings,
 * often omitted, sometimes stored), files saved from a bare BertModel (no `bert.` prefix), and the
 * `position_ids` buffer some versions store.
 */
import { type Graph, numel } from "../ir/mod.ts";
import {
  readSafetensorsFile,
  type SafeDType,
  type TensorEntry,
  toFloat32,
  writeSafetensorsFile,
} from "./safetensors.ts";
import { CheckpointError } from "./checkpoint_error.ts";
import { type HfHeadParts, writeHfHeadFiles } from "./hf_head_files.ts";

export { CheckpointError };

/** Tensors a checkpoint may hold that our graphs do not need as parameters (tied or buffers). */
const TIED_OR_BUFFER: Record<string, (name: string) => string | undefined> = {
  "cls.predictions.decoder.weight": () => "bert.embeddings.word_embeddings.weight",
  "cls.predictions.decoder.bias": () => "cls.predictions.bias",
  "bert.embeddings.position_ids": () => undefined,
};

/** The names a file might use for one of our parameters, most common first. */
function candidates(name: string, bare: boolean): string[] {
  const names = [name];
  const old = name.replace(/LayerNorm\.weight$/, "LayerNorm.gamma").replace(
    /LayerNorm\.bias$/,
    "LayerNorm.beta",
  );
  if (old !== name) names.push(old);
  if (bare && name.startsWith("bert.")) names.push(...names.map((n) => n.slice("bert.".length)));
  return names;
}

const FLOAT_DTYPES: readonly SafeDType[] = ["F32", "F16", "BF16", "F64"];

/**
 * Matches the tensors of a parsed file to the graph's parameters and decodes them to f32. Throws a
 * CheckpointError naming the file and every missing, extra or mis-shaped tensor.
 */
export function mapHfTensors(
  g: Graph,
  tensors: Map<string, TensorEntry>,
  file: string,
): Map<string, Float32Array> {
  const params = g.sources("param");
  const bare = ![...tensors.keys()].some((k) => k.startsWith("bert."));
  const used = new Set<string>();
  const missing: string[] = [], unexpected: string[] = [], wrong: string[] = [], nonFinite: string[] = [];
  const out = new Map<string, Float32Array>();
  for (const [name, node] of params) {
    const found = candidates(name, bare).find((c) => tensors.has(c));
    if (!found) {
      missing.push(`${name} [${node.type.shape}]`);
      continue;
    }
    used.add(found);
    const t = tensors.get(found)!;
    if (t.shape.join(",") !== node.type.shape.join(",")) {
      wrong.push(`${found} is [${t.shape}], expected [${node.type.shape}]`);
    } else if (!FLOAT_DTYPES.includes(t.dtype)) {
      wrong.push(`${found} is ${t.dtype}, expected F32, F16, BF16 or F64`);
    } else {
      const v = toFloat32(t);
      // NaN or infinite weights give NaN outputs with nothing said: a damaged or diverged checkpoint.
      const k = v.findIndex((x) => !Number.isFinite(x));
      if (k >= 0) nonFinite.push(`${found} holds ${v[k]} at element ${k}`);
      else out.set(name, v);
    }
  }
  for (const [k, t] of tensors) {
    if (used.has(k)) continue;
    const tiedTo = TIED_OR_BUFFER[k] ?? TIED_OR_BUFFER[bare ? `bert.${k}` : k];
    if (!tiedTo) {
      unexpected.push(`${k} [${t.shape}]`);
      continue;
    }
    const partner = tiedTo(k), p = partner ? params.get(partner) : undefined;
    if (p && numel(p.type.shape) !== numel(t.shape)) {
      wrong.push(`${k} is [${t.shape}] but is tied to ${partner} [${p.type.shape}]`);
    }
  }
  if (nonFinite.length && !missing.length && !unexpected.length && !wrong.length) {
    throw new CheckpointError(
      `${file}: non-finite weights, refusing them: ${nonFinite.slice(0, 3).join("; ")}${
        nonFinite.length > 3 ? `; and ${nonFinite.length - 3} more tensors` : ""
      }`,
    );
  }
  if (missing.length || unexpected.length || wrong.length) {
    const list = (what: string, xs: string[]) =>
      xs.length ? `${xs.length} ${what} (${xs.slice(0, 4).join(", ")}${xs.length > 4 ? ", ..." : ""})` : "";
    const parts = [list("missing", missing), list("unexpected", unexpected), list("mis-shaped", wrong)];
    const hint = missing.length && unexpected.length ? "; was it saved for another head?" : "";
    throw new CheckpointError(`${file}: ${parts.filter(Boolean).join("; ")}${hint}`);
  }
  return out;
}

/** Reads `<dir>/model.safetensors` and maps it onto the graph's parameters. */
export async function loadHfWeights(g: Graph, dir: string): Promise<Map<string, Float32Array>> {
  const file = `${dir.replace(/\/$/, "")}/model.safetensors`;
  try {
    await Deno.stat(file);
  } catch {
    throw new CheckpointError(
      `${file}: not found (a checkpoint folder holds config.json and model.safetensors)`,
    );
  }
  const { tensors } = await readSafetensorsFile(file);
  return mapHfTensors(g, tensors, file);
}

export type WeightDType = "F32" | "F16" | "BF16";

/**
 * Writes a checkpoint folder in Hugging Face layout: `model.safetensors` with the graph's parameter names
 * (the tied decoder is omitted, as Hugging Face does) and `config.json`. With `head`, config.json names
 * the head's architecture (and labels), and the tokenizer files are written beside it
 * (model_io/hf_head_files.ts). Every file is written atomically. Returns the names of the files written.
 */
export async function writeHfCheckpoint(
  dir: string,
  g: Graph,
  config: object,
  weights: Map<string, ArrayLike<number>>,
  dtype: WeightDType = "F32",
  head?: HfHeadParts,
): Promise<string[]> {
  await Deno.mkdir(dir, { recursive: true });
  const tensors = new Map<string, { dtype: WeightDType; shape: number[]; data: number[] | Float32Array }>();
  for (const [name, node] of g.sources("param")) {
    const w = weights.get(name);
    if (!w) throw new CheckpointError(`${dir}: no value for parameter '${name}'`);
    const data = w instanceof Float32Array ? w : Float32Array.from(w);
    tensors.set(name, { dtype, shape: [...node.type.shape], data });
  }
  if (head) {
    // Config and tokenizer first: they validate labels and vocabulary before the large file is written.
    const names = await writeHfHeadFiles(dir, config, head);
    await writeSafetensorsFile(`${dir}/model.safetensors`, tensors, { format: "pt" });
    return ["model.safetensors", ...names];
  }
  await writeSafetensorsFile(`${dir}/model.safetensors`, tensors, { format: "pt" });
  const tmp = `${dir}/config.json.tmp-${Deno.pid}`;
  await Deno.writeTextFile(tmp, JSON.stringify(config, null, 2) + "\n");
  await Deno.rename(tmp, `${dir}/config.json`);
  return ["model.safetensors", "config.json"];
}
