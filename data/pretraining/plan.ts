/**
 * Which documents go into which shard. The documents are shuffled with the seed (as the original script
 * shuffles all_documents) and cut into consecutive groups of about `shardTokens` corpus tokens. The plan
 * depends only on the corpus, the seed and shardTokens, never on the number of workers, and each shard
 * then draws from its own generator keyed by (seed, shard index): so the output is identical for any
 * --workers.
 */
import { documentTokens, numDocuments, type TokenCorpus } from "./documents.ts";
import { Rng } from "./rng.ts";

/** Stream numbers of the generators derived from the user's seed. */
export const STREAM_PLAN = 1;
export const STREAM_SHARD = 2;

export function planShards(corpus: TokenCorpus, seed: number, shardTokens: number): Uint32Array[] {
  const D = numDocuments(corpus);
  const order = new Uint32Array(D);
  for (let d = 0; d < D; d++) order[d] = d;
  new Rng(seed, STREAM_PLAN).shuffle(order);
  const shards: Uint32Array[] = [];
  let start = 0, tokens = 0;
  for (let k = 0; k < D; k++) {
    tokens += documentTokens(corpus, order[k]);
    if (tokens >= shardTokens || k === D - 1) {
      shards.push(order.slice(start, k + 1));
      start = k + 1;
      tokens = 0;
    }
  }
  return shards;
}

export function shardFileName(index: number): string {
  return `shard-${String(index).padStart(5, "0")}.bin`;
}
