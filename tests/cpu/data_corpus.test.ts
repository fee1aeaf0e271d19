/**
 * The built-in Brown corpus: the conversion from the tagged npm files (counts, known sentences, no tags
 * left, detokenization rules), the text cache, and ensureBrownShards making shards once and reusing them
 * only while they match; the nlp-corpus text and what it leaves out.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  brownCorpusText,
  brownDocuments,
  brownTextPath,
  convertBrown,
  untagLine,
} from "../../data/corpus/brown.ts";
import { brownShardDirName, ensureBrownShards } from "../../data/corpus/brown_shards.ts";
import { detokenize } from "../../data/corpus/detokenize.ts";
import { readManifest } from "../../data/shards/manifest.ts";
import { nlpCorpusText, sentimentTrainText } from "../../data/corpus/sentiment_text.ts";
import { loadSentiment } from "../../data/finetune/sentiment.ts";

Deno.test("brown: 500 documents and 57,340 sentences, in cats.txt order with categories", async () => {
  const docs = await brownDocuments();
  assert.equal(docs.length, 500);
  assert.equal(docs.reduce((n, d) => n + d.sentences.length, 0), 57340);
  assert.deepEqual([docs[0].id, docs[0].category], ["ca01", "news"]);
  assert.deepEqual([docs[499].id, docs[499].category], ["cr09", "humor"]);
  assert.equal(new Set(docs.map((d) => d.category)).size, 15);
  assert.ok(
    docs.every((d) => d.sentences.length > 0 && d.sentences.every((s) => s.trim() === s && s !== "")),
  );
});

Deno.test("brown: known sentences come out as plain text", async () => {
  const docs = await brownDocuments();
  assert.equal(
    docs[0].sentences[0],
    `The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election produced "no evidence" that any irregularities took place.`,
  );
  assert.equal(
    docs[0].sentences[3],
    `"Only a relative handful of such reports was received", the jury said, "considering the widespread interest in the election, the number of voters and the size of this city".`,
  );
  // "Jr." at the end of a sentence does not get a second full stop.
  assert.ok(docs[0].sentences[2].endsWith("Ivan Allen Jr."), docs[0].sentences[2]);
});

Deno.test("brown: no tags are left and the text format is BERT's", async () => {
  const text = await convertBrown();
  // Tags are lower-case codes after a slash, e.g. "/at", "/nn-tl", "/np$"; words with slashes are kept.
  const tagged = text.match(/\S\/(at|nn|nns|jj|vbd|in|cc|np|rb)(-tl|-hl)?(?=\s|$)/g);
  assert.equal(tagged, null, `tags left: ${tagged?.slice(0, 5)}`);
  assert.ok(text.includes("and/or"));
  assert.equal(text.split("\n\n").length, 500);
  // `` and '' become straight quotes; the few '' left are inch marks inside words such as 12''.
  assert.ok(!text.includes("``"));
  assert.ok((text.match(/''/g) ?? []).length < 100 && !/(^|\s)''/m.test(text));
  const spaced = text.match(/.{0,20} [,;:?!)](\s|$)/gm);
  assert.equal(spaced, null, `space before punctuation: ${spaced?.slice(0, 3)}`);
});

Deno.test("untag and detokenize rules", () => {
  assert.equal(untagLine("\tThe/at jury/nn said/vbd ``/`` no/at ''/'' ./.\n"), `The jury said "no".`);
  assert.equal(
    untagLine("1-1/2/cd inches/nns (/( about/rb )/) ;/. and/or/cc"),
    "1-1/2 inches (about); and/or",
  );
  assert.equal(detokenize(["He", "said", "'", "pro", "'", "letters", "."]), "He said 'pro' letters.");
  assert.equal(detokenize(["'", "Yes", "'", "he", "said", "'", "!"]), "'Yes' he said'!");
  assert.equal(detokenize(["a", "--", "b", "?"]), "a -- b?");
  assert.equal(detokenize(["[", "sic", "]", "x"]), "[sic] x");
});

Deno.test("brown text is cached and read back identically", async () => {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-corpus-" });
  try {
    const first = await brownCorpusText({ cacheDir: dir });
    const path = brownTextPath(dir);
    assert.equal(await Deno.readTextFile(path), first);
    await Deno.writeTextFile(path, "cached\n");
    assert.equal(await brownCorpusText({ cacheDir: dir }), "cached\n", "the cache is not read");
    assert.equal(await brownCorpusText({ cacheDir: null }), first);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ensureBrownShards makes shards once, reuses them, and remakes them when they do not match", async () => {
  const cacheDir = await Deno.makeTempDir({ prefix: "bertfuse-corpus-" });
  try {
    const opts = { cacheDir, dupeFactor: 1, maxSeqLength: 64, maxPredictionsPerSeq: 10 };
    assert.equal(brownShardDirName(opts), "brown-s64-p10-d1");
    assert.equal(brownShardDirName({}), "brown-s128");
    const dir = await ensureBrownShards(opts);
    assert.equal(dir, join(cacheDir, "brown-s64-p10-d1"));
    const m = await readManifest(dir);
    assert.equal(m.input.documents, 500);
    assert.equal(m.max_seq_length, 64);
    const stamp = (await Deno.stat(join(dir, "manifest.json"))).mtime?.getTime();

    assert.equal(await ensureBrownShards(opts), dir);
    assert.equal((await Deno.stat(join(dir, "manifest.json"))).mtime?.getTime(), stamp, "remade needlessly");

    // A shard missing (or of the wrong size) makes it prepare again.
    await Deno.truncate(join(dir, m.shards[1].file), 100);
    await ensureBrownShards(opts);
    assert.equal((await Deno.stat(join(dir, m.shards[1].file))).size, m.shards[1].bytes);
    // So does a manifest written with other settings.
    const edited = { ...m, settings: { ...m.settings, seed: 1 } };
    await Deno.writeTextFile(join(dir, "manifest.json"), JSON.stringify(edited));
    await ensureBrownShards(opts);
    assert.equal((await readManifest(dir)).settings.seed, 12345);
  } finally {
    await Deno.remove(cacheDir, { recursive: true });
  }
});

Deno.test("nlp-corpus: the sentiment train text 5 times, then nlp-corpus less sentiment sentences and slurs", async () => {
  const [text, train] = [await nlpCorpusText(), await sentimentTrainText()];
  const head = Array(5).fill(train).join("\n") + "\n";
  assert.ok(text.startsWith(head));
  const docs = text.slice(head.length).trimEnd().split("\n\n").map((d) => d.split("\n"));
  const sentences = docs.flat();
  assert.ok(
    docs.every((d) => d.length >= 1 && d.length <= 8) && sentences.every((s) => s !== "" && s === s.trim()),
  );
  const raw: string[] = (await import("nlp-corpus")).default.all();
  assert.ok(sentences.length > raw.length - 1000 && sentences.length < raw.length, `${sentences.length}`);
  const sentiment = new Set((await loadSentiment("all")).map((e) => e.textA.trim()));
  assert.ok(!sentences.some((s) => sentiment.has(s)), "a sentiment sentence (dev ones too) is in the corpus");
  // AFINN-165's -5 words, matched as whole words ignoring case: some raw sentences hold one, none kept does.
  const afinn = (await import("sentiment/languages/en/labels.json", { with: { type: "json" } })).default;
  const worst = Object.entries(afinn as Record<string, number>).filter(([, v]) => v <= -5).map(([w]) => w);
  const slur = new RegExp(`(^|[^a-z-])(${worst.join("|")})($|[^a-z-])`, "i");
  assert.ok(raw.filter((s) => slur.test(s)).length > 50);
  assert.ok(!sentences.some((s) => slur.test(s)));
  assert.equal(
    brownShardDirName({ corpus: "nlp-corpus", maxSeqLength: 64, maxPredictionsPerSeq: 10 }),
    "nlp-corpus-s64-p10-d3",
  );
});
