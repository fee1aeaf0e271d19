/**
 * prepare-data on the built-in Brown corpus (all 500 documents, dupe_factor 2), read back from the shard
 * files: the masked fraction, the 80/10/10 split and the next-sentence balance are within tolerance of
 * their targets, and every segment, unmasked, is a contiguous run of a document's tokens (with B after
 * A in the same document when the label says "not random").
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { brownCorpusText } from "../../data/corpus/brown.ts";
import { joinChunks, type TokenCorpus, tokenizeChunk } from "../../data/pretraining/documents.ts";
import { roundHalfEven } from "../../data/pretraining/masking.ts";
import { prepareData, type PrepareResult } from "../../data/pretraining/prepare.ts";
import { ShardFile } from "../../data/shards/reader.ts";
import type { Instance } from "../../data/shards/record.ts";
import { defaultTokenizer } from "../../data/tokenizer/mod.ts";

const dir = await Deno.makeTempDir({ prefix: "bertfuse-brown-" });
let result: PrepareResult;
const instances: Instance[] = [];

async function prepared(): Promise<Instance[]> {
  if (instances.length > 0) return instances;
  result = await prepareData({ inputs: ["brown"], output: dir, dupeFactor: 2, seed: 2024, workers: 1 });
  for (const s of result.manifest.shards) {
    const shard = ShardFile.open(join(dir, s.file), { verify: true });
    for (let i = 0; i < shard.recordCount; i++) instances.push(shard.instance(i));
    shard.close();
  }
  return instances;
}

/** Finds token sequences in the corpus: postings per id, anchored on the sequence's rarest token. */
class Finder {
  private postings = new Map<number, number[]>();
  private docEnd: Int32Array; // per token: end of its document in the flat array
  constructor(private corpus: TokenCorpus) {
    const { ids, sentenceStarts, docStarts } = corpus;
    ids.forEach((id, k) => {
      const p = this.postings.get(id);
      if (p) p.push(k);
      else this.postings.set(id, [k]);
    });
    this.docEnd = new Int32Array(ids.length);
    for (let d = 0; d + 1 < docStarts.length; d++) {
      const a = sentenceStarts[docStarts[d]], b = sentenceStarts[docStarts[d + 1]];
      this.docEnd.fill(b, a, b);
    }
  }
  /** Start offsets where `seq` occurs inside one document. */
  find(seq: number[]): number[] {
    let anchor = 0;
    for (let j = 1; j < seq.length; j++) {
      if ((this.postings.get(seq[j])?.length ?? 0) < (this.postings.get(seq[anchor])?.length ?? 0)) {
        anchor = j;
      }
    }
    const out: number[] = [];
    for (const p of this.postings.get(seq[anchor]) ?? []) {
      const start = p - anchor;
      if (start < 0 || start + seq.length > this.docEnd[start]) continue;
      let ok = true;
      for (let j = 0; j < seq.length && ok; j++) ok = this.corpus.ids[start + j] === seq[j];
      if (ok) out.push(start);
    }
    return out;
  }
  sameDocument(a: number, b: number): boolean {
    return this.docEnd[a] === this.docEnd[b];
  }
}

Deno.test({
  name: "brown: masked fraction and the 80/10/10 split",
  async fn() {
    const all = await prepared();
    assert.ok(all.length > 25_000, `${all.length} instances`);
    let tokens = 0, masked = 0, asMask = 0, kept = 0, random = 0;
    for (const x of all) {
      const n = x.inputIds.length;
      tokens += n;
      masked += x.maskedLmPositions.length;
      assert.equal(x.maskedLmPositions.length, Math.min(20, Math.max(1, roundHalfEven(n * 0.15))));
      x.maskedLmPositions.forEach((p, k) => {
        const shown = x.inputIds[p];
        if (shown === 103) asMask++; // [MASK]
        else if (shown === x.maskedLmIds[k]) kept++;
        else random++;
      });
    }
    assert.ok(Math.abs(masked / tokens - 0.15) < 0.003, `masked fraction ${masked / tokens}`);
    assert.ok(Math.abs(asMask / masked - 0.8) < 0.005, `[MASK] share ${asMask / masked}`);
    assert.ok(Math.abs(kept / masked - 0.1) < 0.004, `unchanged share ${kept / masked}`);
    assert.ok(Math.abs(random / masked - 0.1) < 0.004, `random share ${random / masked}`);
    assert.equal(masked, result.masking.masked);
    // Most sequences fill the 128 tokens (short targets are 10% of documents).
    assert.ok(tokens / all.length > 110, `mean length ${tokens / all.length}`);
  },
});

Deno.test({
  name: "brown: next-sentence labels are balanced where the algorithm flips a coin",
  async fn() {
    const all = await prepared();
    const label1 = all.filter((x) => x.nextSentenceLabel === 1).length;
    assert.equal(label1, result.randomNext, "labels in the shards differ from the generator's choices");
    // A one-sentence chunk always takes a random B; every other instance is a fair coin.
    const flips = all.length - result.forcedRandomNext;
    const heads = label1 - result.forcedRandomNext;
    assert.ok(Math.abs(heads / flips - 0.5) < 0.015, `coin ${heads / flips}`);
    assert.ok(label1 / all.length > 0.5 && label1 / all.length < 0.6, `label 1 share ${label1 / all.length}`);
  },
});

Deno.test({
  name: "brown: segments are contiguous runs of their documents' tokens",
  async fn() {
    const all = await prepared();
    const tok = await defaultTokenizer();
    const finder = new Finder(joinChunks([tokenizeChunk(tok, await brownCorpusText())]));
    let checked = 0;
    for (let i = 0; i < all.length; i++) {
      const x = all[i];
      const orig = x.inputIds.slice();
      x.maskedLmPositions.forEach((p, k) => (orig[p] = x.maskedLmIds[k]));
      const a = orig.slice(1, x.segmentBStart - 1), b = orig.slice(x.segmentBStart, orig.length - 1);
      const as = finder.find(a), bs = finder.find(b);
      assert.ok(as.length > 0, `instance ${i}: segment A is not a run of any document`);
      assert.ok(bs.length > 0, `instance ${i}: segment B is not a run of any document`);
      if (x.nextSentenceLabel === 0) {
        const follows = as.some((sa) => bs.some((sb) => finder.sameDocument(sa, sb) && sb >= sa + a.length));
        assert.ok(follows, `instance ${i}: label 0 but B does not follow A in one document`);
      }
      checked++;
    }
    assert.equal(checked, all.length);
  },
});

globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
