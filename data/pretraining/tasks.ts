/**
 * The two kinds of work prepare-data splits up: tokenizing a piece of the input, and making a shard.
 * The same function runs them in a worker (worker.ts) or in the main thread (--workers 1).
 */
import { loadTokenizer, type Tokenizer } from "../tokenizer/mod.ts";
import { buildShard, type ShardJob, type ShardResult } from "./build_shard.ts";
import { type TokenCorpus, tokenizeChunk, type TokenizedChunk } from "./documents.ts";

export interface TokenizerSpec {
  vocab?: string;
  cased: boolean;
}

export type Task =
  | { kind: "tokenize"; tokenizer: TokenizerSpec; text: string }
  | { kind: "shard"; corpus: TokenCorpus; job: ShardJob };

export type TaskResult<T extends Task> = T extends { kind: "tokenize" } ? TokenizedChunk : ShardResult;

// A worker tokenizes several pieces; loading the vocabulary once per worker is enough.
const tokenizers = new Map<string, Promise<Tokenizer>>();

export function tokenizerFor(spec: TokenizerSpec): Promise<Tokenizer> {
  const key = `${spec.cased}\0${spec.vocab ?? ""}`;
  let t = tokenizers.get(key);
  if (!t) {
    t = loadTokenizer({ vocab: spec.vocab, cased: spec.cased });
    tokenizers.set(key, t);
  }
  return t;
}

export async function runTask<T extends Task>(task: T): Promise<TaskResult<T>> {
  if (task.kind === "tokenize") {
    return tokenizeChunk(await tokenizerFor(task.tokenizer), task.text) as TaskResult<T>;
  }
  return await buildShard(task.corpus, task.job) as TaskResult<T>;
}

/** Buffers a result can hand over instead of copying. */
export function transferables(result: TokenizedChunk | ShardResult): ArrayBuffer[] {
  if ("ids" in result) {
    return [
      result.ids.buffer,
      result.sentenceLengths.buffer,
      result.docSentenceCounts.buffer,
    ] as ArrayBuffer[];
  }
  return [];
}
