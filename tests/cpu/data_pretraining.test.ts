/**
 * Pretraining instance creation on small synthetic corpora where every token id is unique, so where a
 * token came from is known: the instance algorithm against a plain transliteration of Google's
 * create_instances_from_document (lists, not ranges), masking rules (counts, positions, 80/10/10, whole
 * words), the RNG, the shard plan, and prepareData's determinism across worker counts and its errors.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  joinChunks,
  splitAtDocuments,
  type TokenCorpus,
  tokenizeChunk,
} from "../../data/pretraining/documents.ts";
import { InstanceMaker, type InstanceSettings } from "../../data/pretraining/instances.ts";
import { Masker, roundHalfEven } from "../../data/pretraining/masking.ts";
import { planShards } from "../../data/pretraining/plan.ts";
import { prepareData } from "../../data/pretraining/prepare.ts";
import { acquireLock } from "../../model_io/outputs.ts";
import { Rng } from "../../data/pretraining/rng.ts";
import { DataError } from "../../data/shards/errors.ts";
import { readManifest } from "../../data/shards/manifest.ts";
import { ShardFile } from "../../data/shards/reader.ts";

const PAD = 0, CLS = 2, SEP = 3, MASK = 4, FIRST = 5;
const VOCAB = { vocabSize: 5000, pad: PAD, cls: CLS, sep: SEP, mask: MASK };

/** A corpus of unique ids: token k of the flat corpus is FIRST + k. docs[d][s] = sentence length. */
function uniqueCorpus(docs: number[][]): TokenCorpus {
  const sentenceLengths = docs.flat();
  const total = sentenceLengths.reduce((a, b) => a + b, 0);
  return joinChunks([{
    ids: Int32Array.from({ length: total }, (_, k) => FIRST + k),
    sentenceLengths: Uint32Array.from(sentenceLengths),
    docSentenceCounts: Uint32Array.from(docs.map((d) => d.length)),
  }]);
}

function randomDocs(seed: number, nDocs: number, maxSentences: number, maxLen: number): number[][] {
  const r = new Rng(seed);
  return Array.from(
    { length: nDocs },
    () => Array.from({ length: r.randint(1, maxSentences) }, () => r.randint(1, maxLen)),
  );
}

const SETTINGS: InstanceSettings = {
  maxSeqLength: 64,
  maxPredictionsPerSeq: 10,
  maskedLmProb: 0.15,
  shortSeqProb: 0.1,
  wholeWordMask: false,
};

interface Plain {
  tokens: number[];
  segmentBStart: number;
  isRandomNext: boolean;
}

/**
 * create_instances_from_document transliterated from the published algorithm, on lists of lists, with
 * the same random draws in the same order (masking is left to the Masker and checked separately).
 */
function referenceInstances(
  docs: number[][][],
  docIndex: number,
  s: InstanceSettings,
  rng: Rng,
  onInstance: (p: Plain) => void,
): void {
  const document = docs[docIndex];
  const maxNumTokens = s.maxSeqLength - 3;
  let targetSeqLength = maxNumTokens;
  if (rng.random() < s.shortSeqProb) targetSeqLength = rng.randint(2, maxNumTokens);
  let currentChunk: number[][] = [];
  let currentLength = 0;
  let i = 0;
  while (i < document.length) {
    const segment = document[i];
    currentChunk.push(segment);
    currentLength += segment.length;
    if (i === document.length - 1 || currentLength >= targetSeqLength) {
      if (currentChunk.length > 0) {
        let aEnd = 1;
        if (currentChunk.length >= 2) aEnd = rng.randint(1, currentChunk.length - 1);
        const tokensA: number[] = currentChunk.slice(0, aEnd).flat();
        const tokensB: number[] = [];
        let isRandomNext = false;
        if (currentChunk.length === 1 || rng.random() < 0.5) {
          isRandomNext = true;
          const targetBLength = targetSeqLength - tokensA.length;
          let randomDocumentIndex = 0;
          for (let t = 0; t < 10; t++) {
            randomDocumentIndex = rng.randint(0, docs.length - 1);
            if (randomDocumentIndex !== docIndex) break;
          }
          const randomDocument = docs[randomDocumentIndex];
          const randomStart = rng.randint(0, randomDocument.length - 1);
          for (let j = randomStart; j < randomDocument.length; j++) {
            tokensB.push(...randomDocument[j]);
            if (tokensB.length >= targetBLength) break;
          }
          i -= currentChunk.length - aEnd;
        } else {
          for (let j = aEnd; j < currentChunk.length; j++) tokensB.push(...currentChunk[j]);
        }
        while (tokensA.length + tokensB.length > maxNumTokens) {
          const trunc = tokensA.length > tokensB.length ? tokensA : tokensB;
          if (rng.random() < 0.5) trunc.shift();
          else trunc.pop();
        }
        onInstance({
          tokens: [CLS, ...tokensA, SEP, ...tokensB, SEP],
          segmentBStart: tokensA.length + 2,
          isRandomNext,
        });
      }
      currentChunk = [];
      currentLength = 0;
    }
    i++;
  }
}

Deno.test("rng: reproducible, stream-separated, uniform enough", () => {
  const a = new Rng(42, 1, 7), b = new Rng(42, 1, 7), c = new Rng(42, 1, 8), d = new Rng(43, 1, 7);
  const xs = Array.from({ length: 8 }, () => a.u32());
  assert.deepEqual(Array.from({ length: 8 }, () => b.u32()), xs);
  assert.notDeepEqual(Array.from({ length: 8 }, () => c.u32()), xs);
  assert.notDeepEqual(Array.from({ length: 8 }, () => d.u32()), xs);
  const r = new Rng(1);
  const counts = new Array(10).fill(0);
  for (let i = 0; i < 100_000; i++) counts[r.below(10)]++;
  for (const c of counts) assert.ok(Math.abs(c - 10_000) < 500, `bucket ${c}`);
  for (let i = 0; i < 1000; i++) {
    const x = r.randint(3, 5);
    assert.ok(x >= 3 && x <= 5 && Number.isInteger(x));
  }
});

Deno.test("roundHalfEven is Python's round", () => {
  const cases: [number, number][] = [[0.5, 0], [1.5, 2], [2.5, 2], [3.5, 4], [2.4, 2], [2.6, 3], [19.2, 19], [
    7,
    7,
  ]];
  for (const [x, want] of cases) assert.equal(roundHalfEven(x), want, `round(${x})`);
});

Deno.test("instances equal a list-based transliteration of create_instances_from_document", () => {
  for (const seed of [1, 2, 3]) {
    const shape = randomDocs(seed, 30, 12, 25);
    const corpus = uniqueCorpus(shape);
    // The same documents as lists of lists of ids.
    let k = FIRST;
    const docs = shape.map((d) => d.map((len) => Array.from({ length: len }, () => k++)));
    for (const shortSeqProb of [0, 0.1, 1]) {
      const settings = { ...SETTINGS, shortSeqProb };
      const maker = new InstanceMaker(corpus, settings, VOCAB);
      const ours: Plain[] = [], theirs: Plain[] = [];
      const r1 = new Rng(seed, 99), r2 = new Rng(seed, 99);
      // The reference draws no masking randomness, so it runs a Masker on the same generator too.
      const masker = new Masker(VOCAB, settings.maxPredictionsPerSeq, 0.15, false, settings.maxSeqLength);
      const scratch = [new Int32Array(64), new Int32Array(64), new Int32Array(64), new Int32Array(64)];
      for (let d = 0; d < docs.length; d++) {
        maker.fromDocument(r1, d, (m) => {
          ours.push({
            tokens: Array.from(m.tokens.subarray(0, m.n)),
            segmentBStart: m.segmentBStart,
            isRandomNext: m.isRandomNext,
          });
        });
        referenceInstances(docs, d, settings, r2, (p) => {
          theirs.push(p);
          const t = Int32Array.from(p.tokens);
          masker.mask(r2, t, t.length, p.segmentBStart, scratch[0], scratch[1], scratch[2]);
        });
      }
      assert.ok(ours.length > 30);
      assert.deepEqual(ours, theirs, `seed ${seed}, short_seq_prob ${shortSeqProb}`);
    }
  }
});

Deno.test("segments are contiguous runs of one document; B follows A unless random", () => {
  const shape = randomDocs(5, 60, 15, 30);
  const corpus = uniqueCorpus(shape);
  const docOfToken: number[] = [];
  shape.forEach((d, i) => d.forEach((len) => docOfToken.push(...new Array(len).fill(i))));
  const maker = new InstanceMaker(corpus, SETTINGS, VOCAB);
  const rng = new Rng(11);
  let pairs = 0, random = 0;
  for (let d = 0; d < shape.length; d++) {
    maker.fromDocument(rng, d, (m) => {
      const t = Array.from(m.tokens.subarray(0, m.n));
      const sb = m.segmentBStart;
      assert.ok(m.n <= SETTINGS.maxSeqLength);
      assert.equal(t[0], CLS);
      assert.equal(t[sb - 1], SEP);
      assert.equal(t[m.n - 1], SEP);
      const a = t.slice(1, sb - 1).map((x) => x - FIRST), b = t.slice(sb, m.n - 1).map((x) => x - FIRST);
      assert.ok(a.length >= 1 && b.length >= 1);
      for (const seg of [a, b]) {
        for (let i = 1; i < seg.length; i++) assert.equal(seg[i], seg[i - 1] + 1, "not contiguous");
        assert.equal(docOfToken[seg[0]], docOfToken[seg[seg.length - 1]], "crosses a document boundary");
      }
      assert.equal(docOfToken[a[0]], d, "A is not from the document being processed");
      assert.deepEqual([m.a[0], m.a[1]], [a[0], a[a.length - 1] + 1]);
      assert.deepEqual([m.b[0], m.b[1]], [b[0], b[b.length - 1] + 1]);
      if (!m.isRandomNext) {
        pairs++;
        assert.equal(docOfToken[b[0]], d);
        assert.ok(b[0] >= a[a.length - 1] + 1, "B does not come after A");
      } else {
        random++;
        assert.notEqual(docOfToken[b[0]], d, "random B from the same document");
      }
    });
  }
  assert.ok(pairs > 50 && random > 50, `${pairs} pairs, ${random} random`);
});

Deno.test("masking: count, positions, labels and the 80/10/10 split", () => {
  const S = 128, P = 20;
  const masker = new Masker(VOCAB, P, 0.15, false, S);
  const rng = new Rng(3);
  const out = new Int32Array(S), pos = new Int32Array(P), lab = new Int32Array(P);
  let mask = 0, kept = 0, rand = 0;
  for (let trial = 0; trial < 4000; trial++) {
    const n = rng.randint(5, S);
    const sb = rng.randint(3, n - 2);
    const tokens = Int32Array.from({ length: n }, (_, i) => FIRST + 100 + i);
    tokens[0] = CLS;
    tokens[sb - 1] = SEP;
    tokens[n - 1] = SEP;
    const m = masker.mask(rng, tokens, n, sb, out, pos, lab);
    assert.equal(m, Math.min(P, Math.max(1, roundHalfEven(n * 0.15))));
    const positions = Array.from(pos.subarray(0, m));
    for (let k = 0; k < m; k++) {
      if (k > 0) assert.ok(positions[k] > positions[k - 1], "positions not ascending");
      assert.ok(![0, sb - 1, n - 1].includes(positions[k]), "a special token was masked");
      assert.equal(lab[k], tokens[positions[k]]);
      if (out[positions[k]] === MASK) mask++;
      else if (out[positions[k]] === tokens[positions[k]]) kept++;
      else rand++;
    }
    for (let i = 0; i < n; i++) if (!positions.includes(i)) assert.equal(out[i], tokens[i]);
  }
  const total = mask + kept + rand;
  assert.ok(Math.abs(mask / total - 0.8) < 0.01, `mask ${mask / total}`);
  assert.ok(Math.abs(kept / total - 0.1) < 0.01, `kept ${kept / total}`);
  assert.ok(Math.abs(rand / total - 0.1) < 0.01, `random ${rand / total}`);
  // The masker's own counts agree, up to random replacements that drew [MASK] or the original id.
  assert.equal(masker.stats.masked, total);
  assert.ok(
    Math.abs(masker.stats.replacedByMask - mask) <= 5 && Math.abs(masker.stats.replacedByRandom - rand) <= 10,
  );
});

Deno.test("whole-word masking masks all pieces of a word and never joins across [SEP]", () => {
  const isContinuation = new Uint8Array(VOCAB.vocabSize);
  const CONT = 1000; // ids >= CONT are "##" pieces
  isContinuation.fill(1, CONT);
  const masker = new Masker({ ...VOCAB, isContinuation }, 20, 0.3, true, 64);
  const rng = new Rng(9);
  const out = new Int32Array(64), pos = new Int32Array(20), lab = new Int32Array(20);
  for (let trial = 0; trial < 500; trial++) {
    // Words of 1-3 pieces; B starts with a continuation piece (as after front truncation).
    const t = [CLS];
    while (t.length < 20) {
      t.push(FIRST + t.length);
      for (let k = rng.randint(0, 2); k > 0; k--) t.push(CONT + t.length);
    }
    t.push(SEP);
    const sb = t.length;
    t.push(CONT + 500, CONT + 501, FIRST + 600, CONT + 602, SEP);
    const tokens = Int32Array.from(t);
    const m = masker.mask(rng, tokens, t.length, sb, out, pos, lab);
    const chosen = new Set(Array.from(pos.subarray(0, m)));
    // Word groups: a start piece and its continuations, where B's leading continuations form their own.
    const groups: number[][] = [];
    for (let i = 1; i < t.length - 1; i++) {
      if (i === sb - 1) continue;
      const continues = isContinuation[t[i]] && i !== sb && groups.length > 0 &&
        groups[groups.length - 1].at(-1) === i - 1;
      if (continues) groups[groups.length - 1].push(i);
      else groups.push([i]);
    }
    for (const g of groups) {
      const n = g.filter((i) => chosen.has(i)).length;
      assert.ok(n === 0 || n === g.length, `word ${g} partly masked`);
    }
    assert.ok(m <= Math.max(1, roundHalfEven(t.length * 0.3)));
  }
});

Deno.test("shard plan: every document once, about shardTokens each, independent of nothing but the seed", () => {
  const corpus = uniqueCorpus(randomDocs(4, 200, 10, 30));
  const plan = planShards(corpus, 7, 2000);
  const all = plan.flatMap((p) => Array.from(p)).sort((a, b) => a - b);
  assert.deepEqual(all, Array.from({ length: 200 }, (_, i) => i));
  assert.ok(plan.length > 5);
  assert.deepEqual(planShards(corpus, 7, 2000), plan);
  assert.notDeepEqual(planShards(corpus, 8, 2000), plan);
});

Deno.test("reading input: documents split at blank lines, pieces tokenize like the whole", () => {
  const tok = { tokenize: (s: string) => ({ ids: s.split(/\s+/).filter((w) => w).map((w) => w.length) }) };
  const text = "a bb\nccc\n\n  \n\nd\n \t \nee ff\n\n\n\ng";
  const whole = tokenizeChunk(tok, text);
  assert.deepEqual(Array.from(whole.docSentenceCounts), [2, 1, 1, 1]);
  assert.deepEqual(Array.from(whole.sentenceLengths), [2, 1, 1, 2, 1]);
  for (let n = 1; n <= 6; n++) {
    const pieces = splitAtDocuments(text, n);
    assert.equal(pieces.join(""), text);
    const joined = joinChunks(pieces.map((p) => tokenizeChunk(tok, p)));
    assert.deepEqual(joined, joinChunks([whole]), `${n} pieces`);
  }
});

async function withTemp<T>(f: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-prep-" });
  try {
    return await f(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** A few hundred lines of real English: the first documents of the Brown corpus text. */
async function sampleText(docs: number): Promise<string> {
  const { brownCorpusText } = await import("../../data/corpus/brown.ts");
  return (await brownCorpusText()).split("\n\n").slice(0, docs).join("\n\n") + "\n";
}

Deno.test("prepareData: the same bytes for 1 and 2 workers; the seed matters", async () => {
  await withTemp(async (dir) => {
    const input = join(dir, "in.txt");
    await Deno.writeTextFile(input, await sampleText(40));
    const run = (out: string, workers: number, seed = 5) =>
      prepareData({
        inputs: [input],
        output: join(dir, out),
        workers,
        seed,
        dupeFactor: 2,
        shardTokens: 20_000,
      });
    const one = await run("w1", 1), two = await run("w2", 2), other = await run("s6", 1, 6);
    assert.ok(one.manifest.shards.length >= 3, `${one.manifest.shards.length} shards`);
    assert.deepEqual(two.manifest, { ...one.manifest });
    for (const s of one.manifest.shards) {
      assert.deepEqual(
        await Deno.readFile(join(dir, "w2", s.file)),
        await Deno.readFile(join(dir, "w1", s.file)),
      );
    }
    assert.notEqual(other.manifest.shards[0].crc32, one.manifest.shards[0].crc32);
    const m = await readManifest(join(dir, "w1"));
    assert.equal(m.input.documents, 40);
    assert.equal(m.records, m.shards.reduce((n, s) => n + s.records, 0));
    assert.equal(m.tokenizer.vocab_size, 30522);
    assert.match(m.tokenizer.vocab_sha256, /^[0-9a-f]{64}$/);
    // Header, manifest and records agree.
    let tokens = 0;
    for (const s of m.shards) {
      const shard = ShardFile.open(join(dir, "w1", s.file), { verify: true });
      assert.equal(shard.recordCount, s.records);
      for (let i = 0; i < shard.recordCount; i++) tokens += shard.instance(i).inputIds.length;
      shard.close();
    }
    assert.equal(tokens, m.tokens);
  });
});

Deno.test("prepareData: replaces an earlier run's shards, keeps other files, errors on bad input", async () => {
  await withTemp(async (dir) => {
    const input = join(dir, "in.txt"), out = join(dir, "out");
    await Deno.writeTextFile(input, await sampleText(12));
    await Deno.mkdir(out);
    await Deno.writeTextFile(join(out, "notes.txt"), "mine");
    await Deno.writeTextFile(join(out, "shard-00999.bin"), "stale");
    await Deno.mkdir(join(out, ".partial-1", "x"), { recursive: true }); // a killed run's folder
    await prepareData({ inputs: [input], output: out, dupeFactor: 1 });
    const names = [...Deno.readDirSync(out)].map((e) => e.name).sort();
    assert.ok(names.includes("notes.txt") && names.includes("manifest.json"));
    assert.ok(!names.includes("shard-00999.bin"));
    assert.ok(names.every((n) => !n.startsWith(".")), `temporary files left: ${names}`);
    const held = await acquireLock(out, "another prepare-data"); // two runs into one folder: the second refused
    const prep = (inputs: string[], output: string, o = {}) => () => prepareData({ inputs, output, ...o });
    await assert.rejects(prep([input], out), /out is in use by another run: pid/);
    await held.release();
    const empty = join(dir, "empty.txt");
    await Deno.writeTextFile(empty, "\n \n\n");
    for (const bad of [empty, join(dir, "nope.txt")]) {
      await assert.rejects(prep([bad], join(dir, "o2")), DataError);
    }
    // Bad input is found before the output directory is touched.
    await assert.rejects(() => Deno.stat(join(dir, "o2")), Deno.errors.NotFound);
    await assert.rejects(prep([input], join(dir, "o3"), { maxSeqLength: 4 }), /max_seq_length/);
    await assert.rejects(
      prep([input], join(dir, "o3"), { maxPredictionsPerSeq: 200 }),
      /max_predictions_per_seq/,
    );
    // The output path is a file: a DataError, and the file survives.
    await assert.rejects(prep([input], input), DataError);
    assert.ok((await Deno.readTextFile(input)).length > 100);
  });
});

Deno.test("worker pool: results equal this thread's, errors come back with their message", async () => {
  const { WorkerPool } = await import("../../data/pretraining/pool.ts");
  const { tokenizerFor } = await import("../../data/pretraining/tasks.ts");
  const text = await sampleText(30);
  const pieces = splitAtDocuments(text, 6);
  const pool = new WorkerPool(3);
  try {
    const spec = { cased: false };
    const got = await Promise.all(
      pieces.map((p) => pool.run({ kind: "tokenize", tokenizer: spec, text: p })),
    );
    const tok = await tokenizerFor(spec);
    assert.deepEqual(joinChunks(got), joinChunks([tokenizeChunk(tok, text)]));
    const corpus = joinChunks(got, true);
    const [index, seed, dupeFactor, docs] = [0, 1, 1, Uint32Array.from([0, 1])];
    const vocab = { ...VOCAB, vocabSize: tok.vocabSize }, path = "/nonexistent-dir-bertfuse/shard.bin";
    const job = { index, docs, path, seed, dupeFactor, settings: SETTINGS, vocab };
    const failures = await Promise.allSettled([0, 1, 2].map(() => pool.run({ kind: "shard", corpus, job })));
    for (const f of failures) {
      assert.equal(f.status, "rejected");
      assert.match(String((f as PromiseRejectedResult).reason), /nonexistent-dir-bertfuse/);
    }
  } finally {
    pool.close();
  }
});

Deno.test("prepareData: a shard that cannot be written leaves the earlier run's output as it was", async () => {
  await withTemp(async (dir) => {
    const input = join(dir, "in.txt");
    await Deno.writeTextFile(input, await sampleText(30));
    for (const workers of [1, 2]) {
      const out = join(dir, `out${workers}`);
      const files = () => [...Deno.readDirSync(out)].map((e) => e.name).sort();
      await prepareData({ inputs: [input], output: out, dupeFactor: 1 }); // one shard
      const before = files().map((f) => [f, Deno.readFileSync(join(out, f)).join()]);
      // A non-empty directory where shard 2 goes: the rename onto it fails.
      await Deno.mkdir(join(out, "shard-00002.bin"), { recursive: true });
      await Deno.writeTextFile(join(out, "shard-00002.bin", "x"), "x");
      await assert.rejects(
        () => prepareData({ inputs: [input], output: out, workers, dupeFactor: 1, shardTokens: 5_000 }),
        (e: unknown) => e instanceof DataError && /cannot write .*shard-00002\.bin/.test(e.message),
      );
      assert.deepEqual(
        files(),
        ["manifest.json", "shard-00000.bin", "shard-00002.bin"],
        `with ${workers} workers`,
      );
      assert.deepEqual(before.map(([f]) => [f, Deno.readFileSync(join(out, f)).join()]), before);
    }
  });
});
