/** Reads a checkpoint folder's tokenizer files from disk (Deno); the parsing is tokenizer.ts's. */
import { TokenizerError } from "../data/tokenizer/mod.ts";
import { type NamedText, tokenizerFromFiles } from "./tokenizer.ts";
import type { BertTokenizer } from "../data/tokenizer/mod.ts";

async function readIfPresent(path: string): Promise<NamedText | undefined> {
  try {
    return { name: path, text: await Deno.readTextFile(path) };
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw new TokenizerError(`${path}: cannot read (${(e as Error).message})`);
  }
}

export async function readCheckpointTokenizer(dir: string): Promise<BertTokenizer> {
  const d = dir.replace(/\/$/, "");
  const vocabTxt = await readIfPresent(`${d}/vocab.txt`);
  return tokenizerFromFiles({
    vocabTxt,
    tokenizerJson: vocabTxt ? undefined : await readIfPresent(`${d}/tokenizer.json`),
    tokenizerConfig: await readIfPresent(`${d}/tokenizer_config.json`),
  }, d);
}
