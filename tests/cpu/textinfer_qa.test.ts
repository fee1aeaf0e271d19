/**
 * QA post-processing from text (textinfer/qa.ts over squad.ts and squad_post.ts) with planted logits: the
 * n best, spans across doc-stride windows, answers starting in the question or in padding refused, and
 * character offsets into the original context (case, accents and odd spacing kept).
 */
import assert from "node:assert/strict";
import { squadFeatures } from "../../data/finetune/squad.ts";
import { squadPredictions } from "../../data/finetune/squad_post.ts";
import { BertTokenizer, readVocabFile } from "../../data/tokenizer/mod.ts";
import { prepareRequest, type QaAnswer, type RowOutput, type TextModel } from "../../textinfer/mod.ts";
import { seededRandom } from "../../cases/random.ts";

const VOCAB = new URL("../fixtures/hf-tiny/qa/vocab.txt", import.meta.url).pathname;
const tok = new BertTokenizer(await readVocabFile(VOCAB));
const SEED = crypto.getRandomValues(new Uint32Array(1))[0] || 1;
const rng = seededRandom(SEED);

/** A model whose runner returns planted logits: `plant(row, ids)` gives [start, end] per position. */
function plantedModel(
  plant: (row: number, ids: number[]) => [number[], number[]],
  maxPositions = 64,
): TextModel {
  return {
    head: "qa",
    tokenizer: tok,
    maxPositions,
    labels: [],
    configPath: "planted/config.json",
    run: (rows) => {
      const s = Math.max(...rows.map((r) => r.input_ids.length));
      const start = new Float32Array(rows.length * s), end = new Float32Array(rows.length * s);
      rows.forEach((r, i) => {
        const [a, b] = plant(i, r.input_ids);
        start.set(a, i * s), end.set(b, i * s);
      });
      return Promise.resolve(
        new Map<string, RowOutput>([
          ["start_logits", { shape: [rows.length, s], data: start }],
          ["end_logits", { shape: [rows.length, s], data: end }],
        ]),
      );
    },
  };
}

async function ask(model: TextModel, question: string, context: string, opts = {}): Promise<QaAnswer> {
  const p = prepareRequest(model, { kind: "qa", question, context }, opts, "test");
  return p.finish(await model.run(p.rows), 0) as QaAnswer;
}

/** Small random logits (fresh each run) so planted values decide. */
const noise = (n: number) => Array.from({ length: n }, () => rng.normal() * 0.1);

Deno.test("n best: sorted, distinct, at most n, probabilities a softmax of start+end logits", async () => {
  const context = "Harry grew up in Canada and loves apples";
  // Context positions (after the first [SEP]) a little higher, so that the 7 best starts and ends pair up.
  const biased = (ids: number[]) => {
    const sep = ids.indexOf(tok.special.sep);
    return noise(ids.length).map((x, k) => (k > sep && k < ids.length - 1 ? x + 1 : x));
  };
  const model = plantedModel((_, ids) => [biased(ids), biased(ids)]);
  const a = await ask(model, "where did harry grow up?", context, { nBestSize: 7 });
  assert.ok(a.nbest.length <= 7 && a.nbest.length > 1, `${a.nbest.length} entries (seed ${SEED})`);
  assert.equal(new Set(a.nbest.map((e) => e.text)).size, a.nbest.length, "distinct texts");
  for (let i = 1; i < a.nbest.length; i++) assert.ok(a.nbest[i - 1].score >= a.nbest[i].score);
  const sum = a.nbest.reduce((x, e) => x + e.score, 0);
  assert.ok(Math.abs(sum - 1) < 1e-9, `probabilities sum to ${sum}`);
  assert.deepEqual([a.answer, a.start, a.end, a.score], [
    a.nbest[0].text,
    a.nbest[0].start,
    a.nbest[0].end,
    a.nbest[0].score,
  ]);
  for (const e of a.nbest) assert.equal(context.slice(e.start, e.end), e.text);
});

Deno.test("answers starting in the question or in padding are refused; offsets keep case, accents, spacing", () => {
  const context = "My  name is HARRY and I grew up in Canadá.";
  const question = "what is my name?";
  // squad.ts pads features to maxSeqLength; post-process the padded features directly.
  const { features } = squadFeatures(
    [{ id: "x", title: "", question, context, answers: [], isImpossible: false }],
    tok,
    { maxSeqLength: 40, docStride: 10, maxQueryLength: 20 },
  );
  assert.equal(features.length, 1);
  const f = features[0];
  const n = f.input_ids.length, real = f.attention_mask.lastIndexOf(1) + 1;
  assert.ok(real < n, "the feature has padding");
  const harry = f.charStart.findIndex((c) => c === context.indexOf("HARRY"));
  const start = noise(n), end = noise(n);
  start[2] = end[3] = 50; // inside the question
  start[real + 1] = end[real + 2] = 40; // padding
  start[0] = end[0] = 30; // [CLS]: the null answer, not considered without v2
  start[harry] = end[harry] = 5;
  const [p] = squadPredictions(
    [{ id: "x", title: "", question, context, answers: [], isImpossible: false }],
    [f],
    [{ start_logits: start, end_logits: end }],
    { nBest: 5 },
  );
  assert.equal(p.text, "HARRY", `seed ${SEED}`);
  assert.deepEqual([p.nbest[0].start, p.nbest[0].end], [
    context.indexOf("HARRY"),
    context.indexOf("HARRY") + 5,
  ]);
  // An answer across the accent and the double space keeps the context's own characters.
  const canada = f.charStart.findIndex((c) => c === context.indexOf("Canadá"));
  const my = f.charStart.findIndex((c) => c === 0);
  start[my] = 60, end[canada] = 60;
  const [q] = squadPredictions(
    [{ id: "x", title: "", question, context, answers: [], isImpossible: false }],
    [f],
    [{ start_logits: start, end_logits: end }],
    { nBest: 5, maxAnswerLength: 30 },
  );
  assert.equal(q.text, "My  name is HARRY and I grew up in Canadá");
  // Too long for maxAnswerLength: refused, the next best wins.
  const [r] = squadPredictions(
    [{ id: "x", title: "", question, context, answers: [], isImpossible: false }],
    [f],
    [{ start_logits: start, end_logits: end }],
    { nBest: 5, maxAnswerLength: 4 },
  );
  assert.notEqual(r.text, q.text);
  assert.ok(r.nbest.every((e) => tok.ids(e.text).length <= 4), JSON.stringify(r.nbest));
});

Deno.test("doc stride: a long context is split; the answer comes from the window where it has most context", async () => {
  // Distinct words so that every span's text is unique; long enough for several windows of 24.
  const words = "harry canada apples paris france river john mary book film movie".split(" ");
  const filler = Array.from({ length: 60 }, () => words[Math.floor(rng.uniform() * words.length)]);
  const target = Math.floor(rng.range(20, 40));
  filler[target] = "capital";
  const context = filler.join(" ");
  const where = context.split(" ").slice(0, target).join(" ").length + (target > 0 ? 1 : 0);
  // In each window holding 'capital': start there, end at the window's last context token, scored higher
  // in later windows. Only the window where 'capital' is most central (BERT's max-context rule, computed
  // here from the windows as run) may start an answer there, so the answer ends where that window ends.
  const cap = tok.tokenToId("capital")!;
  const seen: { row: number; central: number }[] = [];
  const model = plantedModel((row, ids) => {
    const s = noise(ids.length), e = noise(ids.length);
    const k = ids.indexOf(cap), off = ids.indexOf(tok.special.sep) + 1, last = ids.length - 2;
    if (k >= 0) {
      const len = last - off + 1;
      seen.push({ row, central: Math.min(k - off, last - k) + 0.01 * len });
      s[k] = 8;
      e[last] = 8 + row;
    }
    return [s, e];
  });
  const a = await ask(model, "what is it?", context, { maxSeqLength: 24, docStride: 6, maxAnswerLength: 30 });
  assert.ok(a.windows >= 5, `${a.windows} windows`);
  assert.ok(seen.length >= 2, "several windows hold it");
  const best = seen.reduce((x, y) => (y.central > x.central ? y : x));
  assert.ok(
    best.row !== Math.max(...seen.map((w) => w.row)),
    `seed ${SEED}: the planted trap is the last window`,
  );
  assert.ok(a.answer.startsWith("capital"), `seed ${SEED}: ${a.answer}`);
  assert.equal(a.start, where);
  assert.equal(context.slice(a.start, a.end), a.answer);
  // The answer ends at a window's last word: the most central window's, not the higher-scoring later one's.
  const expectedEnd = windowEndWord(context, 24 - tok.ids("what is it?").length - 3, 6, best.row);
  assert.equal(a.answer.split(" ").at(-1), expectedEnd, `seed ${SEED}`);
});

/** The last word of window `w` when one-token words are windowed `size` at a time, `stride` apart. */
function windowEndWord(context: string, size: number, stride: number, w: number): string {
  const words = context.split(" ");
  return words[Math.min(words.length, w * stride + size) - 1];
}

Deno.test("a question that alone does not fit is an error; so is one over --max-query-length", () => {
  const model = plantedModel((_, ids) => [noise(ids.length), noise(ids.length)], 16);
  const long = Array.from({ length: 13 }, () => "harry").join(" ");
  assert.throws(
    () => prepareRequest(model, { kind: "qa", question: long, context: "paris" }, {}, "req.jsonl:3"),
    (e: Error) =>
      /^req.jsonl:3: the question has 13 tokens; .* no room for the context in 16 positions$/.test(e.message),
  );
  assert.throws(
    () =>
      prepareRequest(model, { kind: "qa", question: "harry harry harry", context: "paris" }, {
        maxQueryLength: 2,
      }, "x"),
    /x: the question has 3 tokens, more than --max-query-length 2/,
  );
  assert.throws(
    () => prepareRequest(model, { kind: "qa", question: "who", context: "paris" }, { maxSeqLength: 99 }, "x"),
    /--max-seq-length 99 is more than the model's 16 positions/,
  );
});
