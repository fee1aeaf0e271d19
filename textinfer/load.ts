/** Reads a checkpoint folder's tokenizer files from disk (Deno); the parsing is tokenizer.ts's. */
import { readUtf8 } from "../data/read_bounded.ts";
import { TokenizerError } from "../data/tokenizer/mod.ts";
import { type NamedText, tokenizerFromFiles } from "./tokenizer.ts";
import type { BertTokenizer } from "../data/tokenizer/mod.ts";

/** Tokenizer files are small (BERT's vocab.txt 232 KB, a multilingual tokenizer.json a few MB). */
const MAX_TOKENIZER_BYTES = 64 * 2 ** 20;

async function readIfPresent(path: string): Promise<NamedText | undefined> {
  const missing = await Deno.lstat(path).then(() => false, (e) => e instanceof Deno.errors.NotFound);
  if (missing) return undefined;
  const fail = (m: string) => new TokenizerError(m);
  return { name: path, text: await readUtf8(path, { what: "tokenizer", fail, budget: MAX_TOKENIZER_BYTES }) };
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
