/** A TextModel for a checkpoint folder on disk (Deno): its tokenizer files and config, and a runner. */
import type { BertConfig } from "../models/bert_config.ts";
import { labelsOf } from "./answer.ts";
import { readCheckpointTokenizer } from "./load.ts";
import type { Head, ModelRunner, TextModel } from "./types.ts";

export async function openTextModel(
  dir: string,
  config: BertConfig,
  head: Head,
  run: ModelRunner,
): Promise<TextModel> {
  const d = dir.replace(/\/$/, "");
  return {
    head,
    tokenizer: await readCheckpointTokenizer(d),
    maxPositions: config.max_position_embeddings,
    labels: labelsOf(config),
    configPath: `${d}/config.json`,
    run,
  };
}
