/**
 * A checkpoint opened in the page: config, weights, tokenizer and the WebGPU runner, as the TextModel that
 * textinfer/ answers requests with. Errors name the file, as `deno task infer`'s do.
 */
import { defineBert, type Head, headOf } from "../models/bert.ts";
import { type BertConfig, parseBertConfig } from "../models/bert_config.ts";
import { mapHfTensors } from "../model_io/hf_checkpoint.ts";
import { parseSafetensors } from "../model_io/safetensors.ts";
import type { GpuContext } from "../runtime/webgpu/device.ts";
import { labelsOf, type TextModel, tokenizerFromFiles } from "../textinfer/mod.ts";
import type { CheckpointSource } from "./checkpoint_source.ts";
import { WebGPURunner } from "./webgpu_runner.ts";

export interface BrowserModel {
  readonly name: string;
  readonly head: Head;
  readonly config: BertConfig;
  readonly text: TextModel;
  readonly runner: WebGPURunner;
  /** Milliseconds spent reading and parsing the files. */
  readonly loadMs: number;
}

async function maybeText(src: CheckpointSource, file: string) {
  return src.has(file) ? { name: `${src.name}/${file}`, text: await src.text(file) } : undefined;
}

export async function openBrowserModel(src: CheckpointSource, gpu: GpuContext): Promise<BrowserModel> {
  const t0 = performance.now();
  const configPath = `${src.name}/config.json`;
  if (!src.has("config.json")) throw new Error(`${configPath}: not found (pick a checkpoint folder)`);
  let raw: unknown;
  try {
    raw = JSON.parse(await src.text("config.json"));
  } catch (e) {
    throw new Error(`${configPath}: invalid JSON (${(e as Error).message})`);
  }
  const config = parseBertConfig(raw, configPath);
  const head = headOf(config);
  const model = defineBert(src.name, config);
  const weightsPath = `${src.name}/model.safetensors`;
  if (!src.has("model.safetensors")) throw new Error(`${weightsPath}: not found`);
  const { tensors } = parseSafetensors(await src.bytes("model.safetensors"), weightsPath);
  const weights = mapHfTensors(
    model.build({ head, mode: "infer", batchSize: 1, seqLen: 1 }),
    tensors,
    weightsPath,
  );
  const vocabTxt = await maybeText(src, "vocab.txt");
  const tokenizer = tokenizerFromFiles({
    vocabTxt,
    tokenizerJson: vocabTxt ? undefined : await maybeText(src, "tokenizer.json"),
    tokenizerConfig: await maybeText(src, "tokenizer_config.json"),
  }, src.name);
  const runner = new WebGPURunner(gpu, model, head, weights);
  return {
    name: src.name,
    head,
    config,
    runner,
    loadMs: performance.now() - t0,
    text: {
      head,
      tokenizer,
      maxPositions: config.max_position_embeddings,
      labels: labelsOf(config),
      configPath,
      run: (rows) => runner.run(rows),
    },
  };
}
