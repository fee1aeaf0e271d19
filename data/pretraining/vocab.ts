/** What instance creation needs from a tokenizer, and the fingerprint the manifest records. */
import type { Tokenizer } from "../tokenizer/mod.ts";
import type { ShardVocab } from "./build_shard.ts";

export function shardVocab(tok: Tokenizer, wholeWordMask: boolean): ShardVocab {
  const { pad, cls, sep, mask } = tok.special;
  let isContinuation: Uint8Array | undefined;
  if (wholeWordMask) {
    isContinuation = new Uint8Array(tok.vocabSize);
    for (let id = 0; id < tok.vocabSize; id++) {
      isContinuation[id] = tok.idToToken(id).startsWith("##") ? 1 : 0;
    }
  }
  return { vocabSize: tok.vocabSize, pad, cls, sep, mask, isContinuation };
}

/** SHA-256 of the vocabulary in id order, one token per line: equal hashes mean equal ids. */
export async function vocabHash(tok: Tokenizer): Promise<string> {
  const lines: string[] = [];
  for (let id = 0; id < tok.vocabSize; id++) lines.push(tok.idToToken(id));
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(lines.join("\n") + "\n"));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}
