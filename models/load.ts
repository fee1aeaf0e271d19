/**
 * Finds a model from what a user types: a model file (`models/bert-large.ts`, whose default export is a
 * BertModel) or a Hugging Face / NVIDIA `config.json`.
 */
import { pathToFileURL } from "node:url";
import { type BertModel, defineBert } from "./bert.ts";
import { ConfigError, MAX_MODEL_BYTES, readBertConfig } from "./bert_config.ts";

export async function loadModel(spec: string): Promise<BertModel> {
  const st = await Deno.stat(spec).catch(() => undefined);
  if (!st?.isFile || st.size > MAX_MODEL_BYTES) {
    const what = !st
      ? "not found"
      : st.isFile
      ? `${st.size} bytes, too large for a model`
      : "not a regular file";
    throw new ConfigError(`${spec}: ${what} (give a models/*.ts file or a config.json)`);
  }
  if (spec.endsWith(".json")) {
    const name = spec.replace(/\/?config\.json$/, "").split("/").pop() || "bert";
    return defineBert(name, readBertConfig(spec));
  }
  let mod: { default?: unknown };
  try {
    mod = await import(pathToFileURL(spec).href);
  } catch (e) {
    throw new ConfigError(`${spec}: cannot load model file (${(e as Error).message.split("\n")[0]})`);
  }
  const m = mod.default as BertModel | undefined;
  if (!m || typeof m.build !== "function" || typeof m.config !== "object") {
    throw new ConfigError(`${spec}: the default export is not a model (use defineBert(name, config))`);
  }
  return m;
}
