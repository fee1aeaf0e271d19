/**
 * SQuAD v1.1/v2.0 (small hand-written fixtures): parsing, doc_stride windows, the answer's positions
 * and their way back to text, post-processing of logits (n-best, max answer length, null answers),
 * the official scores, and errors naming the file and line.
 */
import assert from "node:assert/strict";
import {
  DatasetError,
  f1Score,
  normalizeAnswer,
  parseSquad,
  readSquad,
  type SquadExample,
  type SquadFeature,
  squadFeatures,
  type SquadLogits,
  squadPredictions,
  squadScores,
} from "../../data/finetune/mod.ts";
import { defaultTokenizer } from "../../data/tokenizer/mod.ts";

const FX = new URL("../fixtures/finetune/squad/", import.meta.url).pathname;
const tok = await defaultTokenizer();
const v1 = await readSquad(`${FX}tiny-v1.1.json`);
const v2 = await readSquad(`${FX}tiny-v2.0.json`);
const single = v1.examples.filter((e) => e.answers.length === 1);
/** v2.0 training data: one answer or none. */
const v2train = v2.examples.filter((e) => e.answers.length <= 1);
const OPTS = { maxSeqLength: 64, docStride: 16, maxQueryLength: 16 };

/** Logits that point at given positions: 8 there, 0 elsewhere; and at [CLS] with `nullLogit`. */
function pointAt(f: SquadFeature, start: number, end: number, nullLogit = -5): SquadLogits {
  const s = new Array(f.input_ids.length).fill(0), e = s.slice();
  s[0] = e[0] = nullLogit;
  if (start > 0) s[start] = e[end] = 8;
  return { start_logits: s, end_logits: e };
}

Deno.test("parse v1.1 and v2.0", () => {
  assert.equal(v1.examples.length, 15);
  assert.equal(v1.v2, false);
  assert.equal(v2.examples.length, 18);
  assert.equal(v2.v2, true);
  assert.equal(v2.examples.filter((e) => e.isImpossible).length, 3);
  const mc3 = v1.examples.find((e) => e.id === "mc3")!;
  assert.equal(mc3.title, "Marie_Curie");
  assert.equal(mc3.context.slice(mc3.answers[0].start).slice(0, 12), "Pierre Curie");
  assert.deepEqual(v1.examples.find((e) => e.id === "mc6")!.answers.map((a) => a.text), [
    "the Sorbonne",
    "Sorbonne",
  ]);
});

Deno.test("doc_stride windows: [CLS] query [SEP] window [SEP], windows advance by the stride and cover the context", () => {
  const { features } = squadFeatures(single, tok, { ...OPTS, training: true });
  single.forEach((ex, i) => {
    const fs = features.filter((f) => f.exampleIndex === i);
    const ctx = tok.ids(ex.context);
    const query = tok.ids(ex.question).slice(0, 16);
    const maxDoc = 64 - query.length - 3;
    let covered = 0;
    fs.forEach((f, k) => {
      assert.equal(f.docSpanIndex, k);
      const n = f.attention_mask.filter((m) => m === 1).length;
      const len = n - query.length - 3;
      assert.ok(len >= 1 && len <= maxDoc);
      assert.deepEqual(f.input_ids.slice(0, query.length + 2), [101, ...query, 102]);
      assert.deepEqual(f.input_ids.slice(query.length + 2, n), [...ctx.slice(k * 16, k * 16 + len), 102]);
      assert.deepEqual(f.token_type_ids, [
        ...Array(query.length + 2).fill(0),
        ...Array(len + 1).fill(1),
        ...Array(64 - n).fill(0),
      ]);
      assert.deepEqual(f.input_ids.slice(n), Array(64 - n).fill(0));
      assert.equal(f.input_ids.length, 64);
      covered = k * 16 + len;
    });
    assert.equal(covered, ctx.length, `${ex.id}: the last window reaches the end`);
    assert.equal(fs.length, Math.max(1, Math.ceil((ctx.length - maxDoc) / 16) + 1), ex.id);
    // Every context token is the max-context token of exactly one window.
    for (let t = 0; t < ctx.length; t++) {
      const owners = fs.filter((f, k) => t >= k * 16 && f.tokenIsMaxContext[query.length + 2 + t - k * 16]);
      assert.equal(owners.length, 1, `${ex.id} token ${t}`);
    }
  });
  assert.ok(features.some((f) => f.docSpanIndex >= 4), "some example needs several windows");
});

Deno.test("answer positions map back to the exact answer text; windows without the answer point at [CLS]", () => {
  const { features, skipped } = squadFeatures(single, tok, { ...OPTS, training: true });
  assert.deepEqual(skipped, []);
  const found = new Set<string>();
  for (const f of features) {
    const ex = single[f.exampleIndex];
    const { start_position: s, end_position: e } = f;
    if (s === 0) {
      assert.equal(e, 0);
      continue;
    }
    assert.ok(s <= e && f.charStart[s] >= 0 && f.charEnd[e] >= 0);
    assert.equal(ex.context.slice(f.charStart[s], f.charEnd[e]), ex.answers[0].text, ex.id);
    assert.equal(
      normalizeAnswer(ex.context.slice(f.charStart[s], f.charEnd[e])),
      normalizeAnswer(ex.answers[0].text),
    );
    found.add(ex.id);
  }
  assert.equal(found.size, single.length, "every answer is inside some window");
  // Positions outside the context have no characters or words; context positions have both.
  for (const f of features) {
    f.input_ids.forEach((_, p) => {
      const isCtx = f.token_type_ids[p] === 1 && f.input_ids[p] !== 102;
      assert.equal(f.charStart[p] >= 0, isCtx);
      assert.equal(f.tokenToWord[p] >= 0, isCtx);
      if (isCtx) {
        const ex = single[f.exampleIndex];
        const word = ex.context.split(/[ \t\r\n\u202f]+/)[f.tokenToWord[p]];
        assert.ok(word.includes(ex.context.slice(f.charStart[p], f.charEnd[p])), `${ex.id} position ${p}`);
      }
    });
  }
});

Deno.test("max_query_length truncates the question; bad sizes are errors", () => {
  const ex: SquadExample = { ...single[0], question: "why ".repeat(40) };
  const [f] = squadFeatures([ex], tok, { maxSeqLength: 64, docStride: 16, maxQueryLength: 5 }).features;
  assert.deepEqual(f.input_ids.slice(0, 7), [101, ...Array(5).fill(tok.tokenToId("why")), 102]);
  assert.equal(f.token_type_ids[7], 1);
  assert.throws(() => squadFeatures([ex], tok, { maxSeqLength: 10, maxQueryLength: 7 }), DatasetError);
  assert.throws(() => squadFeatures([ex], tok, { docStride: 0 }), /docStride must be a positive integer/);
  const two = v1.examples.find((e) => e.id === "mc6")!;
  assert.throws(
    () => squadFeatures([two], tok, { training: true }),
    /mc6: training needs exactly one answer, it has 2/,
  );
});

Deno.test("answers whose text is not at answer_start are skipped in training, as BERT does", () => {
  const ex = { ...single[1], answers: [{ text: "Vienna", start: 3 }] };
  const { features, skipped } = squadFeatures([ex], tok, { training: true });
  assert.deepEqual(skipped, [ex.id]);
  assert.equal(features.length, 0);
});

Deno.test("v2.0 training: unanswerable questions point at [CLS] in every window", () => {
  const { features } = squadFeatures(v2train, tok, { ...OPTS, training: true });
  const impossible = new Set(v2train.flatMap((e, i) => e.isImpossible ? [i] : []));
  assert.equal(impossible.size, 3);
  for (const f of features) {
    if (impossible.has(f.exampleIndex)) assert.deepEqual([f.start_position, f.end_position], [0, 0]);
  }
  assert.ok(features.some((f) => !impossible.has(f.exampleIndex) && f.start_position > 0));
});

Deno.test("post-processing: logits at the gold positions give back the answers (v1.1), scores 100", () => {
  const { features } = squadFeatures(single, tok, { ...OPTS, training: true });
  const results = features.map((f) => pointAt(f, f.start_position, f.end_position));
  const preds = squadPredictions(single, features, results, { nBest: 5 });
  preds.forEach((p, i) => {
    assert.equal(p.id, single[i].id);
    assert.equal(p.text, single[i].answers[0].text, "original case and accents kept");
    assert.ok(p.nbest.length >= 1 && p.nbest.length <= 5);
    assert.ok(Math.abs(p.nbest.reduce((a, b) => a + b.probability, 0) - 1) < 1e-12);
    for (let k = 1; k < p.nbest.length; k++) assert.ok(p.nbest[k - 1].probability >= p.nbest[k].probability);
    assert.equal(new Set(p.nbest.map((n) => n.text)).size, p.nbest.length, "distinct texts");
    assert.equal(p.nullScoreDiff, undefined);
  });
  const scores = squadScores(v1.examples, new Map(preds.map((p) => [p.id, p.text])));
  assert.deepEqual(scores, { exact: 100, f1: 100, total: single.length });
  // A span longer than maxAnswerLength is never chosen: "about 801,463 km²" is 7 tokens.
  const dn3 = single.findIndex((e) => e.id === "dn3");
  const short = squadPredictions(single, features, results, { maxAnswerLength: 6 })[dn3];
  assert.notEqual(short.text, "about 801,463 km²");
});

Deno.test("post-processing v2.0: the null answer wins by the threshold, loses otherwise", () => {
  const { features } = squadFeatures(v2train, tok, { ...OPTS, training: true });
  // Answerable: the span scores 16, [CLS] scores 2 * -5. Unanswerable: [CLS] 2 * 9 beats any span (<= 16).
  const results = features.map((f) => {
    const imp = v2train[f.exampleIndex].isImpossible;
    const ctx0 = f.token_type_ids.indexOf(1);
    return pointAt(f, imp ? ctx0 : f.start_position, imp ? ctx0 : f.end_position, imp ? 9 : -5);
  });
  const preds = squadPredictions(v2train, features, results, { v2: true });
  preds.forEach((p, i) => {
    const ex = v2train[i];
    assert.equal(p.text, ex.isImpossible ? "" : ex.answers[0].text, ex.id);
    assert.ok(p.nbest.some((n) => n.text === ""), "the null answer is among the n best");
    assert.equal(typeof p.nullScoreDiff, "number");
  });
  assert.deepEqual(squadScores(v2train, new Map(preds.map((p) => [p.id, p.text]))).exact, 100);
  // Null 18 vs span 16: diff 2. A threshold of 3 lets the span through.
  const mcx1 = v2train.findIndex((e) => e.id === "mc-x1");
  const p = squadPredictions(v2train, features, results, { v2: true, nullScoreDiffThreshold: 3 })[mcx1];
  assert.ok(Math.abs(p.nullScoreDiff! - 2) < 1e-12);
  assert.notEqual(p.text, "");
  assert.throws(() => squadPredictions(v2train, features, results.slice(1)), DatasetError);
});

Deno.test("official answer normalization, exact match and F1", () => {
  assert.equal(normalizeAnswer("  The Black   Sea! "), "black sea");
  assert.equal(normalizeAnswer("an apple, a pear"), "apple pear");
  assert.equal(
    normalizeAnswer("Café à la carte"),
    "café à la carte",
    "only ASCII punctuation and whole-word articles go",
  );
  assert.equal(f1Score("the Black Sea", "Black Sea coast"), 0.8);
  assert.equal(f1Score("", ""), 1);
  assert.equal(f1Score("x", ""), 0);
  const ex = v2.examples.filter((e) => e.id === "mc-x1" || e.id === "mc6");
  assert.deepEqual(squadScores(ex, new Map([["mc-x1", ""], ["mc6", "Sorbonne"]])), {
    exact: 100,
    f1: 100,
    total: 2,
  });
  assert.deepEqual(squadScores(ex, new Map([["mc-x1", "1906"], ["mc6", "at the Sorbonne"]])), {
    exact: 0,
    f1: 100 * (0 + 2 * 1 * 0.5 / 1.5) / 2,
    total: 2,
  });
});

Deno.test("malformed SQuAD JSON: errors name the file, line and question", async () => {
  const bad = (text: string, re: RegExp) =>
    assert.throws(() => parseSquad(text, "dev.json"), (e: Error) => {
      assert.ok(e instanceof DatasetError, String(e));
      assert.match(e.message, re);
      return true;
    });
  bad(
    '{"data": [\n  {"paragraphs": [\n    {"context": "abc", "qas": [}\n]}]}',
    /^dev\.json:3:32: invalid JSON: expected a value$/,
  );
  bad('{"data": [{"title": "t" "paragraphs": []}]}', /^dev\.json:1:25: invalid JSON: expected ',' or '}'$/);
  bad('{"version": "1.1"}', /^dev\.json: top level: not SQuAD JSON \(no 'data' array\)$/);
  bad(
    '{"data": [{"paragraphs": [{"qas": []}]}]}',
    /^dev\.json: data\[0\]\.paragraphs\[0\]: no 'context' string$/,
  );
  const doc = (qa: object) =>
    JSON.stringify(
      { data: [{ title: "t", paragraphs: [{ context: "Paris is big.", qas: [qa] }] }] },
      null,
      1,
    );
  bad(
    doc({ id: "q1", answers: [] }),
    /^dev\.json:10: data\[0\]\.paragraphs\[0\]\.qas\[0\] \(id q1\): no 'question' string$/,
  );
  bad(
    doc({ id: "q2", question: "?", answers: [{ text: "big", answer_start: 12 }] }),
    /^dev\.json:\d+: .*\(id q2\): answers\[0\] ends past the context \(answer_start 12 \+ 3 characters > 13\)$/,
  );
  bad(
    doc({ id: "q3", question: "?", answers: [{ text: "big" }] }),
    /\(id q3\): answers\[0\]\.answer_start is not a non-negative integer/,
  );
  bad(
    doc({ id: "q4", question: "?", is_impossible: true, answers: [{ text: "big", answer_start: 9 }] }),
    /\(id q4\): is_impossible is true but it has answers/,
  );
  await assert.rejects(readSquad(`${FX}missing.json`), /SQuAD file not found: .*missing\.json/);
  await assert.rejects(readSquad("/dev/zero"), /SQuAD \/dev\/zero: over 511 MiB, the most one run reads/);
});
