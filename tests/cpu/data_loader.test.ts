/**
 * The loader over real shards (the first Brown documents): batches hold exactly the shard records in the
 * model's layout, every epoch visits every record once in a seeded order that changes per epoch, a saved
 * state resumes exactly (also across an epoch boundary and with another batch size), and corrupt,
 * truncated or mismatched data fails with the file and offset named.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { brownCorpusText } from "../../data/corpus/brown.ts";
import { Loader, type LoaderState } from "../../data/loader.ts";
import { EpochPermutation } from "../../data/loader_permutation.ts";
import { HeldOutSet, heldOutSplit, targetCounts, unigramLogits } from "../../data/heldout.ts";
import type { Batch } from "../../data/loader_batch.ts";
import { prepareData } from "../../data/pretraining/prepare.ts";
import { DataError, ShardError } from "../../data/shards/errors.ts";
import { readManifest } from "../../data/shards/manifest.ts";
import { ShardFile } from "../../data/shards/reader.ts";
import type { Instance } from "../../data/shards/record.ts";

const root = await Deno.makeTempDir({ prefix: "bertfuse-loader-" });
const DIR = join(root, "shards");
{
  const input = join(root, "in.txt");
  await Deno.writeTextFile(input, (await brownCorpusText()).split("\n\n").slice(0, 25).join("\n\n"));
  await prepareData({ inputs: [input], output: DIR, dupeFactor: 1, shardTokens: 12_000, seed: 3 });
}
globalThis.addEventListener("unload", () => Deno.removeSync(root, { recursive: true }));

/** All records in shard order, via the shard reader (independent of the loader). */
async function recordsOf(dir: string): Promise<Instance[]> {
  const out: Instance[] = [];
  for (const s of (await readManifest(dir)).shards) {
    const shard = ShardFile.open(join(dir, s.file));
    for (let i = 0; i < shard.recordCount; i++) out.push(shard.instance(i));
    shard.close();
  }
  return out;
}

/** Row r of a batch as an Instance (unpadded), checking the padding conventions on the way. */
function rowOf(b: Batch, r: number): Instance {
  const S = b.seqLength, P = b.maxPredictions;
  const att = Array.from(b.attention_mask.subarray(r * S, (r + 1) * S));
  const n = att.indexOf(0) < 0 ? S : att.indexOf(0);
  assert.ok(att.slice(n).every((x) => x === 0) && att.slice(0, n).every((x) => x === 1));
  const types = Array.from(b.token_type_ids.subarray(r * S, (r + 1) * S));
  const sb = types.indexOf(1);
  assert.ok(types.slice(sb, n).every((x) => x === 1) && types.slice(n).every((x) => x === 0));
  const ids = Array.from(b.input_ids.subarray(r * S, (r + 1) * S));
  assert.ok(ids.slice(n).every((x) => x === 0), "padding id is not 0");
  const lmIds = Array.from(b.masked_lm_ids.subarray(r * P, (r + 1) * P));
  const m = lmIds.indexOf(-1) < 0 ? P : lmIds.indexOf(-1);
  const lmPos = Array.from(b.masked_lm_positions.subarray(r * P, (r + 1) * P));
  assert.ok(lmIds.slice(m).every((x) => x === -1) && lmPos.slice(m).every((x) => x === 0));
  return {
    inputIds: ids.slice(0, n),
    segmentBStart: sb,
    maskedLmPositions: lmPos.slice(0, m),
    maskedLmIds: lmIds.slice(0, m),
    nextSentenceLabel: b.next_sentence_labels[r],
  };
}

function rows(loader: Loader, batches: number): Instance[] {
  const out: Instance[] = [];
  for (let k = 0; k < batches; k++) {
    const b = loader.next();
    for (let r = 0; r < b.batchSize; r++) out.push(rowOf(b, r));
  }
  return out;
}

const key = (x: Instance) => JSON.stringify(x);

Deno.test("permutation: a bijection for awkward sizes, different per epoch and seed", () => {
  for (const n of [1, 2, 3, 5, 17, 100, 1000, 4097]) {
    const p = new EpochPermutation(n, 7, 0), seen = new Uint8Array(n);
    for (let i = 0; i < n; i++) seen[p.at(i)]++;
    assert.ok(seen.every((c) => c === 1), `not a permutation of ${n}`);
  }
  const order = (seed: number, epoch: number, p = new EpochPermutation(1000, seed, epoch)) =>
    Array.from({ length: 1000 }, (_, i) => p.at(i));
  const base = order(7, 0);
  assert.notDeepEqual(order(7, 1), base);
  assert.notDeepEqual(order(8, 0), base);
  assert.deepEqual(order(7, 0), base);
  // Shuffled, not shifted: few fixed points and many descents.
  assert.ok(base.filter((x, i) => x === i).length < 10);
  assert.ok(base.filter((x, i) => i > 0 && x < base[i - 1]).length > 400);
  assert.throws(() => new EpochPermutation(2 ** 32 + 1, 0, 0), RangeError);
});

Deno.test("unshuffled batches are the shard records in order; the held-out split, unigram, weighting", async () => {
  const records = await recordsOf(DIR), n = (await readManifest(DIR)).shards.length;
  const loader = await Loader.open(DIR, { batchSize: 16, shuffle: false });
  assert.equal(loader.records, records.length);
  assert.ok(records.length > 100 && n >= 3);
  const got = rows(loader, Math.ceil(records.length / 16));
  assert.deepEqual(got.slice(0, records.length), records);
  // The last batch wrapped into the next epoch, starting again from the first record.
  assert.deepEqual(got.slice(records.length), records.slice(0, got.length - records.length));
  assert.equal(loader.epoch, 1);
  loader.close();
  const split = await heldOutSplit(DIR),
    train = await Loader.open(DIR, { batchSize: 1, shardRange: split.train });
  assert.deepEqual(split, { train: [0, n - 1], heldOut: [n - 1, n] });
  assert.deepEqual(await heldOutSplit(DIR, false), { train: [0, n] }); // a user's folder: every shard trains
  const trained = records.slice(0, train.records), held = records.slice(train.records, train.records + 50);
  assert.deepEqual(rows(train, trained.length).map(key).sort(), trained.map(key).sort());
  train.close();
  const ids = trained.flatMap((r) => r.maskedLmIds), counts = await targetCounts(DIR, split.train);
  const want = ids.reduce((m, t) => m.set(t, (m.get(t) ?? 0) + 1), new Map<number, number>());
  const unigram = [...want].sort((a, b) => b[1] - a[1] || a[0] - b[0])[0][0]; // most frequent, then lowest id
  assert.ok(counts.every((c, id) => c === (want.get(id) ?? 0)));
  const set = await HeldOutSet.open(DIR, counts, split.heldOut!, 50, 16), last = set.batches[3];
  assert.deepEqual(held.map((_, i) => rowOf(set.batches[i >> 4], i & 15)), held);
  assert.ok(last.masked_lm_ids.subarray(2 * last.maxPredictions).every((t) => t === -1)); // rows 50-63
  assert.ok(set.batches.length === 4 && last.next_sentence_labels.subarray(2).every((l) => l === -1));
  // Fresh random per-batch figures, weighted by each batch's scored positions (NSP: its rows).
  const figs = set.batches.map(() => [Math.random(), 5 * Math.random(), Math.random()] as const);
  const m = await set.measure((b) => Promise.resolve(figs[set.batches.indexOf(b)]));
  const targets = (b: number) => held.slice(16 * b, 16 * b + 16).flatMap((r) => r.maskedLmIds);
  const mean = (f: (b: number) => number, w: (b: number) => number) =>
    [0, 1, 2, 3].reduce((t, b) => t + f(b) * w(b), 0) / [0, 1, 2, 3].reduce((t, b) => t + w(b), 0);
  const scored = (b: number) => targets(b).length,
    close = (a: number, b: number) => assert.ok(Math.abs(a - b) < 1e-12);
  close(m.heldout_mlm_accuracy, mean((b) => figs[b][0], scored));
  close(m.heldout_mlm_loss, mean((b) => figs[b][1], scored));
  close(m.heldout_nsp_accuracy, mean((b) => figs[b][2], (b) => Math.min(16, 50 - 16 * b)));
  const unigramShare = (b: number) => targets(b).filter((t) => t === unigram).length / scored(b);
  close(m.unigram_mlm_accuracy, mean(unigramShare, scored));
  assert.deepEqual([set.unigramId, m.heldout_instances], [unigram, 50]);
  // The decoder bias start: add-one log frequencies (fresh random counts; ids past them count 0).
  const c = Float64Array.from({ length: 7 }, () => Math.floor(9 * Math.random())), lg = unigramLogits(c, 9);
  const total = c.reduce((a, x) => a + x) + 9;
  lg.forEach((l, id) => assert.ok(Math.abs((Math.exp(l) * total) / ((c[id] ?? 0) + 1) - 1) < 1e-6));
});

Deno.test("every epoch visits every record exactly once, in a new order", async () => {
  const records = (await recordsOf(DIR)).map(key).sort(), N = records.length;
  const loader = await Loader.open(DIR, { batchSize: 7, seed: 11 });
  const stream = rows(loader, Math.ceil((3 * N) / 7)).map(key);
  const epochs = [0, 1, 2].map((e) => stream.slice(e * N, (e + 1) * N));
  for (const e of epochs) assert.deepEqual(e.slice().sort(), records);
  assert.notDeepEqual(epochs[0], epochs[1]);
  assert.notDeepEqual(epochs[0], records);
  loader.close();
});

Deno.test("resume from a saved state continues exactly, across epochs and batch sizes", async () => {
  const N = (await readManifest(DIR)).records, B = 32;
  const a = await Loader.open(DIR, { batchSize: B, seed: 5 });
  rows(a, 5);
  const saved: LoaderState = JSON.parse(JSON.stringify(a.state()));
  assert.equal(saved.position, 5 * B);
  const more = Math.ceil((2 * N) / B); // past at least one epoch boundary
  const expected = rows(a, more);
  assert.ok(a.epoch >= 2);
  a.close();

  const b = await Loader.open(DIR, { batchSize: B, state: saved });
  assert.deepEqual(rows(b, more), expected);
  assert.deepEqual(b.state(), { ...saved, epoch: b.epoch, position: b.position });
  b.close();

  // Another batch size continues the same record stream.
  const c = await Loader.open(DIR, { batchSize: 8, state: saved });
  assert.deepEqual(rows(c, (more * B) / 8), expected);
  c.close();

  // An uninterrupted run with the same seed sees the same stream from the start.
  const d = await Loader.open(DIR, { batchSize: B, seed: 5 });
  assert.deepEqual(rows(d, 5 + more).slice(5 * B), expected);
  d.close();
});

Deno.test("a state from elsewhere, or with another seed, is refused", async () => {
  const a = await Loader.open(DIR, { batchSize: 4, seed: 1 });
  a.next();
  const state = a.state();
  a.close();
  await assert.rejects(() => Loader.open(DIR, { batchSize: 4, seed: 2, state }), /seed 1/);
  await assert.rejects(
    () => Loader.open(DIR, { batchSize: 4, state: { ...state, fingerprint: "12-00000000" } }),
    (e: unknown) => e instanceof DataError && /another shard set/.test(e.message),
  );
  await assert.rejects(
    () => Loader.open(DIR, { batchSize: 4, state: { ...state, position: 1e9 } }),
    /position/,
  );
  await assert.rejects(() => Loader.open(DIR, { batchSize: 0 }), DataError);
  await assert.rejects(() => Loader.open(join(root, "nowhere"), { batchSize: 4 }), /manifest\.json/);
});

/** A copy of the shard directory to damage. */
async function copyDir(name: string): Promise<{ dir: string; files: string[] }> {
  const dir = join(root, name);
  await Deno.mkdir(dir);
  const files: string[] = [];
  for (const e of Deno.readDirSync(DIR)) {
    await Deno.copyFile(join(DIR, e.name), join(dir, e.name));
    if (e.name.endsWith(".bin")) files.push(join(dir, e.name));
  }
  return { dir, files: files.sort() };
}

Deno.test("corrupt and truncated shards fail on open with the file and offset", async () => {
  const { dir, files } = await copyDir("damaged");
  const target = files[1], good = await Deno.readFile(target);
  const headerSize = ShardFile.open(target).header.headerSize;

  const flipped = good.slice();
  flipped[headerSize + 1234] ^= 4;
  await Deno.writeFile(target, flipped);
  await assert.rejects(() => Loader.open(dir, { batchSize: 4 }), (e: unknown) => {
    assert.ok(e instanceof ShardError, String(e));
    assert.ok(e.message.includes(target) && e.message.includes("checksum"), e.message);
    assert.equal(e.offset, headerSize);
    return true;
  });

  await Deno.writeFile(target, good.subarray(0, good.length - 10));
  await assert.rejects(() => Loader.open(dir, { batchSize: 4 }), (e: unknown) => {
    assert.ok(
      e instanceof ShardError && e.message.includes(target) && /truncated/.test(e.message),
      String(e),
    );
    assert.equal(e.offset, good.length - 10);
    return true;
  });

  // Without the checksum pass, a damaged record is caught when it is read, naming its offset.
  const bad = good.slice();
  const shard = ShardFile.open(join(DIR, target.split("/").pop()!));
  const at = shard.offsetOf(2) + shard.layout.numTokens;
  bad.set([0xff, 0x7f], at);
  shard.close();
  await Deno.writeFile(target, bad);
  const loader = await Loader.open(dir, { batchSize: 1000, shuffle: false, verify: false });
  assert.throws(() => loader.next(), (e: unknown) => {
    assert.ok(e instanceof ShardError && e.message.includes(target), String(e));
    assert.ok(e.message.includes("record 2: num_tokens"), e.message);
    assert.equal(e.offset, at - shard.layout.numTokens);
    return true;
  });
  loader.close();
});

Deno.test("a manifest that disagrees with its shards is refused", async () => {
  const { dir } = await copyDir("mismatch");
  const m = await readManifest(dir);
  m.shards[0].records += 1;
  await Deno.writeTextFile(join(dir, "manifest.json"), JSON.stringify(m));
  await assert.rejects(() => Loader.open(dir, { batchSize: 4 }), /the manifest says/);
  m.shards[0].records -= 1;
  m.shards[0].file = "../escape.bin";
  await Deno.writeTextFile(join(dir, "manifest.json"), JSON.stringify(m));
  await assert.rejects(() => Loader.open(dir, { batchSize: 4 }), /plain file name/);
});

Deno.test("shards with int32 ids (a vocabulary over 65,536) load the same way", async () => {
  const { recordLayout } = await import("../../data/shards/format.ts");
  const { RecordBuffer, writeShard } = await import("../../data/shards/writer.ts");
  const { writeManifest, MANIFEST_FORMAT } = await import("../../data/shards/manifest.ts");
  const dir = join(root, "i32"), V = 100_000, S = 16, P = 3, layout = recordLayout(S, P, V);
  await Deno.mkdir(dir);
  assert.equal(layout.idDtype, "i32");
  const buf = new RecordBuffer(layout, 0);
  const want: Instance[] = [];
  for (let k = 0; k < 10; k++) {
    const ids = [2, 70_000 + k, 99_999, 3, 65_537, 3];
    const lm = { maskedLmPositions: [1, 4], maskedLmIds: [66_000 + k, 5], nextSentenceLabel: k % 2 };
    const x = { inputIds: ids, segmentBStart: 4, ...lm };
    buf.append(ids, ids.length, 4, x.maskedLmPositions, x.maskedLmIds, 2, x.nextSentenceLabel);
    want.push(x);
  }
  const w = await writeShard(join(dir, "shard-00000.bin"), layout, { vocabSize: V, padId: 0 }, buf.payload());
  const sizes = { max_seq_length: S, max_predictions_per_seq: P, vocab_size: V, records: 10, tokens: 60 };
  const shards = [{ file: "shard-00000.bin", records: 10, tokens: 60, bytes: w.bytes, crc32: "" }];
  const rest = { record_size: layout.recordSize, shards, settings: {} as never, tokenizer: {} as never };
  const head = { format: MANIFEST_FORMAT, version: 1, generator: "test", input: {} as never } as const;
  await writeManifest(dir, { ...head, ...sizes, ...rest });
  const loader = await Loader.open(dir, { batchSize: 10, shuffle: false });
  assert.deepEqual(rows(loader, 1), want);
  loader.close();
});
