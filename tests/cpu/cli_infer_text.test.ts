/**
 * `deno task infer` on text, as a user runs it, against an independent computation: ids from the npm
 * package @huggingface/tokenizers (not our tokenizer), the reference interpreter in f64 on those ids, and
 * the answer picked here by brute force. Fresh random sentences every run (the seed is in the messages).
 * Then the unhappy paths: one line naming the file, exit 1, nothing on stdout.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { defineBert, type Head, INFER_OUTPUTS } from "../../models/bert.ts";
import { readBertConfig } from "../../models/bert_config.ts";
import { loadHfWeights } from "../../model_io/hf_checkpoint.ts";
import { runInference } from "../../runtime/infer.ts";
import { referenceBackend } from "../../runtime/reference/reference_backend.ts";
import { readVocabFile } from "../../data/tokenizer/mod.ts";
import { hfTokenizer } from "../../data/tokenizer/hf.ts";
import { seededRandom } from "../../cases/random.ts";
import { runCli, withTemp } from "../util/cli.ts";

const FX = new URL("../fixtures/hf-tiny/", import.meta.url).pathname;
const SEED = crypto.getRandomValues(new Uint32Array(1))[0] || 1;
const rng = seededRandom(SEED);
const PERMS = ["--allow-read", "--allow-write", "--allow-env", "--allow-ffi"];
const hf = hfTokenizer(await readVocabFile(`${FX}qa/vocab.txt`));
const WORDS = Deno.readTextFileSync(`${FX}qa/vocab.txt`).split("\n")
  .filter((t) => /^[a-z]+$/.test(t));

/** n distinct random vocabulary words (distinct, so every answer span has its own text). */
function words(n: number): string[] {
  const pool = WORDS.slice();
  for (let i = pool.length - 1; i > 0; i--) {
    const j = Math.floor(rng.uniform() * (i + 1));
    [pool[i], pool[j]] = [pool[j], pool[i]];
  }
  return pool.slice(0, n);
}

/** HF's ids for a pair, with segment ids (its encode gives none): 1 after the first [SEP]. */
function hfRow(a: string, b?: string) {
  const ids = hf.encode(a, b === undefined ? {} : { text_pair: b }).ids;
  const sep = ids.indexOf(3);
  return {
    input_ids: ids,
    token_type_ids: ids.map((_, i) => (i > sep ? 1 : 0)),
    attention_mask: ids.map(() => 1),
  };
}

async function oracle(dir: string, head: Head, row: ReturnType<typeof hfRow>) {
  const cfg = readBertConfig(`${FX}${dir}/config.json`);
  const model = defineBert(dir, cfg);
  const graphFor = (b: number, s: number) => model.build({ head, mode: "infer", batchSize: b, seqLen: s });
  const weights = await loadHfWeights(graphFor(1, 1), `${FX}${dir}`);
  return await runInference([row], {
    batchSize: 1,
    outputs: INFER_OUTPUTS[head],
    graphFor,
    backend: referenceBackend("f64"),
    weights,
  });
}

async function infer(args: string[]) {
  const r = await runCli("infer.ts", [...args, "--backend", "reference"], PERMS);
  assert.equal(r.code, 0, r.stderr);
  return r.stdout.trim().split("\n").map((l) => JSON.parse(l));
}

const softmax = (xs: ArrayLike<number>) => {
  const m = Math.max(...Array.from(xs));
  const e = Array.from(xs, (x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
};

Deno.test("--question/--context: the best span and its score match a brute-force search on HF ids", async () => {
  const w = words(16);
  const question = w.slice(0, 4).join(" ") + " ?";
  const context = w.slice(4).join(" ") + " .";
  const row = hfRow(question, context);
  const out = await oracle("qa", "qa", row);
  const start = out.get("start_logits")!.data, end = out.get("end_logits")!.data;
  const first = row.input_ids.indexOf(3) + 1, last = row.input_ids.length - 2;
  // BERT's rule: pairs among the 20 best starts and 20 best ends, inside the context, at most 30 long.
  const top = (xs: Float32Array) => Array.from(xs.keys()).sort((a, b) => xs[b] - xs[a] || a - b).slice(0, 20);
  const pairs: { s: number; e: number; score: number }[] = [];
  for (const s of top(start)) {
    for (const e of top(end)) {
      if (s >= first && e <= last && s <= e && e - s < 30) pairs.push({ s, e, score: start[s] + end[e] });
    }
  }
  pairs.sort((a, b) => b.score - a.score);
  const probs = softmax(pairs.slice(0, 20).map((p) => p.score));
  const best = pairs[0];
  const expectTokens = hf.encode(context, { add_special_tokens: false }).tokens.slice(
    best.s - first,
    best.e - first + 1,
  );

  const [a] = await infer(["--checkpoint", `${FX}qa`, "--question", question, "--context", context]);
  assert.equal(context.slice(a.start, a.end), a.answer);
  assert.deepEqual(hf.encode(a.answer, { add_special_tokens: false }).tokens, expectTokens, `seed ${SEED}`);
  assert.ok(Math.abs(a.score - probs[0]) < 1e-4, `score ${a.score} vs ${probs[0]} (seed ${SEED})`);
  assert.equal(a.nbest.length, Math.min(20, pairs.length));
  assert.equal(a.windows, 1);
});

Deno.test("--text/--text-pair: label and probabilities match the interpreter on HF ids", async () => {
  const w = words(9);
  const text = w.slice(0, 5).join(" "), pair = w.slice(5).join(" ");
  for (const args of [[text], [text, pair]]) {
    const out = await oracle("classification", "classification", hfRow(args[0], args[1]));
    const p = softmax(out.get("logits")!.data);
    const flags = ["--checkpoint", `${FX}classification`, "--text", args[0]];
    if (args[1]) flags.push("--text-pair", args[1]);
    const [a] = await infer(flags);
    const labels = ["negative", "neutral", "positive"]; // the checkpoint's id2label
    const best = p.indexOf(Math.max(...p));
    assert.equal(a.label, labels[best], `seed ${SEED}`);
    labels.forEach((l, i) =>
      assert.ok(Math.abs(a.scores[l] - p[i]) < 1e-5, `${l}: ${a.scores[l]} vs ${p[i]}`)
    );
  }
});

Deno.test("fill-mask: the top-k tokens and scores match the interpreter's MLM softmax", async () => {
  const w = words(8);
  const k = Math.floor(rng.range(1, w.length - 1));
  const row = hfRow(w.join(" "));
  row.input_ids[k + 1] = 4; // [MASK] in place of word k (every word here is one token)
  const out = await oracle("pretraining", "pretraining", row);
  const v = out.get("prediction_logits")!.shape[2];
  const p = softmax(out.get("prediction_logits")!.data.subarray((k + 1) * v, (k + 2) * v));
  const order = Array.from(p.keys()).sort((a, b) => p[b] - p[a]);
  const text = w.map((x, i) => (i === k ? "[MASK]" : x)).join(" ");
  const [a] = await infer(["--checkpoint", `${FX}pretraining`, "--text", text, "--top-k", "4"]);
  assert.equal(a.masks.length, 1);
  assert.deepEqual(a.masks[0].map((g: { id: number }) => g.id), order.slice(0, 4), `seed ${SEED}`);
  a.masks[0].forEach((g: { score: number; token: string; id: number }) => {
    assert.ok(Math.abs(g.score - p[g.id]) < 1e-5);
    assert.equal(g.token, hf.id_to_token(g.id));
  });
});

Deno.test("--input of text requests: one answer per line, ids echoed; a long context gets several windows", async () => {
  await withTemp(async (dir) => {
    const long = Array.from({ length: 5 }, () => words(30).join(" ")).join(" . ");
    const file = join(dir, "requests.jsonl");
    await Deno.writeTextFile(
      file,
      [{ id: "q1", question: "what is it ?", context: long }, { id: 2, question: "who ?", context: "john" }]
        .map((r) => JSON.stringify(r)).join("\n") + "\n",
    );
    const answers = await infer(["--checkpoint", `${FX}qa`, "--input", file]);
    assert.deepEqual(answers.map((a) => a.id), ["q1", 2]);
    assert.ok(answers[0].windows > 2, `${answers[0].windows} windows`);
    assert.equal(long.slice(answers[0].start, answers[0].end), answers[0].answer);
    assert.equal(answers[1].answer, "john");
  });
});

Deno.test("a long context: a line each tenth of its windows; over 1,000,000 characters refused", () =>
  withTemp(async (dir) => {
    const file = join(dir, "long.jsonl"), context = Array.from({ length: 50 }, () => words(50).join(" "));
    await Deno.writeTextFile(file, JSON.stringify({ question: "who ?", context: context.join(" . ") }));
    const args = ["--checkpoint", `${FX}qa`, "--input", file];
    const r = await runCli("infer.ts", [...args, "--backend", "reference"], PERMS);
    assert.equal(r.code, 0, r.stderr);
    assert.ok((r.stderr.match(/^ {2}\d+\/\d+ rows$/gm) ?? []).length >= 5, r.stderr);
    assert.match(r.stderr, /^ {2}(\d+)\/\1 rows$/m);
    await Deno.writeTextFile(file, JSON.stringify({ question: "who ?", context: "a ".repeat(500_001) }));
    await refused(args, /:1: the context has 1000002 characters, more than 1000000/);
  }));

/** A user error: exit 1, one line on stderr naming `names`, nothing on stdout. */
async function refused(args: string[], names: RegExp) {
  const r = await runCli("infer.ts", args, PERMS);
  assert.equal(r.code, 1, r.stderr);
  assert.equal(r.stdout, "");
  const lines = r.stderr.trim().split("\n").filter((l) => !l.startsWith("no --checkpoint"));
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0], names);
}

Deno.test("bad input: wrong head, vocabulary without [MASK], a question that does not fit, a mixed file", async () => {
  await refused(
    ["--checkpoint", `${FX}classification`, "--question", "who", "--context", "john"],
    /hf-tiny\/classification\/config.json is a BertForSequenceClassification checkpoint; a question needs/,
  );
  await refused(
    ["--checkpoint", `${FX}qa`, "--text", "john"],
    /hf-tiny\/qa\/config.json is a BertForQuestionAnswering/,
  );
  await withTemp(async (dir) => {
    for (const f of ["config.json", "model.safetensors"]) {
      await Deno.copyFile(`${FX}pretraining/${f}`, join(dir, f));
    }
    const vocab = (await Deno.readTextFile(`${FX}pretraining/vocab.txt`)).replace("[MASK]\n", "[MAZK]\n");
    await Deno.writeTextFile(join(dir, "vocab.txt"), vocab);
    await refused(
      ["--checkpoint", dir, "--text", "john [MASK]"],
      new RegExp(`${dir}/vocab.txt: .*no \\[MASK\\]`),
    );
    // Tokenizer files are read bounded (a sparse 65 MiB file is refused by its size), a folder by its kind.
    await Deno.truncate(join(dir, "vocab.txt"), 65 * 2 ** 20);
    await refused(["--checkpoint", dir, "--text", "john"], /vocab.txt: over 64 MiB, the most one run reads/);
    await Deno.remove(join(dir, "vocab.txt"));
    await refused(["--checkpoint", dir, "--text", "john [MASK]"], /no vocab.txt or tokenizer.json/);
    await Deno.mkdir(join(dir, "tokenizer.json"));
    await refused(["--checkpoint", dir, "--text", "john"], /tokenizer file .*tokenizer.json is a directory/);
    await Deno.rename(join(dir, "config.json"), join(dir, "c.json"));
    await Deno.mkdir(join(dir, "config.json"));
    await refused(["--checkpoint", dir, "--text", "john"], /config.json: not a regular file$/);

    const file = join(dir, "r.jsonl");
    const q = Array.from({ length: 70 }, () => "john").join(" ");
    await Deno.writeTextFile(
      file,
      `{"question":"who","context":"john"}\n{"question":"${q}","context":"john"}\n`,
    );
    await refused(
      ["--checkpoint", `${FX}qa`, "--input", file],
      new RegExp(`${file}:2: the question has 70 tokens`),
    );
    await Deno.writeTextFile(file, `{"text":"john"}\n{"input_ids":[2,3]}\n`);
    await refused(
      ["--checkpoint", `${FX}classification`, "--input", file],
      new RegExp(`${file}:2: a token-id row`),
    );
  });
});
