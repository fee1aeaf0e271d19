/**
 * `deno task finetune` through the command line on WebGPU (lavapipe in CI), each task path a user can take,
 * BERT-tiny for two steps: SQuAD v1.1 and v2.0 (train, evaluate, predict), the GLUE tasks from their TSV
 * folders (MRPC, CoLA, STS-B as regression, MNLI with matched and mismatched dev sets, SST-2 in fp16 with
 * gradient accumulation). Each run folder must hold its files in the formats their readers expect: the
 * official SQuAD predictions.json / nbest_predictions.json / null_odds.json, eval_results.json with the
 * official scripts' keys, GLUE's `index  prediction` TSV, metrics.jsonl and a checkpoint.
 *
 * The commands run from an empty folder: the default start is the newest checkpoint under ./out/runs/, and
 * a developer's own pre-training run must not change what these tests start from.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { cliEnv, ROOT, withTemp } from "../util/cli.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();
const FIX = join(ROOT, "tests/fixtures/finetune");

async function finetune(cwd: string, args: string[]): Promise<void> {
  const perms = "read write env ffi run".split(" ").map((p) => `--allow-${p}`);
  const flags = ["--backend", "webgpu", "--max-steps", "2", "--train-batch-size", "4", ...args];
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--config", join(ROOT, "deno.json"), ...perms, join(ROOT, "cli/finetune.ts"), ...flags],
    cwd,
    env: cliEnv(),
  }).output();
  const err = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, err);
}

const readJson = async (p: string) => JSON.parse(await Deno.readTextFile(p));

/** metrics.jsonl has one record per step (--log-freq 1 is not given: the last step is always logged). */
async function checkTrainingFiles(run: string, steps: number): Promise<void> {
  const lines = (await Deno.readTextFile(join(run, "metrics.jsonl"))).trim().split("\n");
  const last = JSON.parse(lines.at(-1)!);
  assert.equal(last.step, steps);
  assert.ok(Number.isFinite(last.loss) && last.loss > 0, `loss ${last.loss}`);
  for (const f of ["loss_curve.svg", "loss_curve.png", `ckpt_${steps}/model.safetensors`]) {
    assert.ok((await Deno.stat(join(run, f))).size > 0, f);
  }
}

/** The ids of a SQuAD file's questions, in file order. */
async function squadIds(file: string): Promise<string[]> {
  const j = await readJson(file);
  return j.data.flatMap((a: { paragraphs: { qas: { id: string }[] }[] }) =>
    a.paragraphs.flatMap((p) => p.qas.map((q) => q.id))
  );
}

/**
 * predictions.json and nbest_predictions.json exactly as run_squad.py writes them. In v2.0 the null answer
 * joins a list that lacks it, so a list may hold nBest + 1 entries, and the prediction is the best span
 * unless the null score wins (then "").
 */
async function checkSquadPredictions(run: string, ids: string[], nBest: number, v2: boolean): Promise<void> {
  const pred = await readJson(join(run, "predictions.json"));
  assert.deepEqual(Object.keys(pred).sort(), [...ids].sort());
  for (const id of ids) assert.equal(typeof pred[id], "string", id);
  const nbest = await readJson(join(run, "nbest_predictions.json"));
  assert.deepEqual(Object.keys(nbest).sort(), [...ids].sort());
  for (const id of ids) {
    const list = nbest[id];
    const most = v2 ? nBest + 1 : nBest;
    assert.ok(Array.isArray(list) && list.length >= 1 && list.length <= most, `${id}: ${list.length}`);
    for (const e of list) {
      // Exactly the official fields, in run_squad.py's order: no offsets or other extras.
      assert.deepEqual(Object.keys(e), ["text", "probability", "start_logit", "end_logit"], id);
      assert.equal(typeof e.text, "string");
      for (const k of ["probability", "start_logit", "end_logit"]) assert.ok(Number.isFinite(e[k]), k);
    }
    const total = list.reduce((s: number, e: { probability: number }) => s + e.probability, 0);
    assert.ok(Math.abs(total - 1) < 1e-5, `${id}: probabilities sum to ${total}`);
    const bestSpan = v2 ? list.find((e: { text: string }) => e.text !== "")?.text : list[0].text;
    assert.ok(
      pred[id] === bestSpan || (v2 && pred[id] === ""),
      `${id}: '${pred[id]}' is not the best answer`,
    );
  }
}

/** A GLUE predictions TSV: the submission header, one row per test example, labels spelled as the files. */
async function checkTsv(path: string, rows: number, ok: (label: string) => boolean): Promise<void> {
  const lines = (await Deno.readTextFile(path)).trimEnd().split("\n");
  assert.equal(lines[0], "index\tprediction");
  assert.equal(lines.length - 1, rows, path);
  lines.slice(1).forEach((l, i) => {
    const [index, label] = l.split("\t");
    assert.equal(index, String(i));
    assert.ok(ok(label), `${path}: label '${label}'`);
  });
}

const testRows = async (file: string) => (await Deno.readTextFile(file)).trimEnd().split("\n").length - 1;

Deno.test({
  name: "finetune CLI: SQuAD v1.1 train, eval and predict write the official files",
  ignore: !gpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const file = join(FIX, "squad/tiny-v1.1.json"), run = join(dir, "run");
      // A short sequence and stride so that long contexts span several windows.
      await finetune(dir, [
        ...["--task", "squad", "--do_train", "--do-eval", "--do-predict", "--train-file", file],
        ...["--predict_file", file, "--max-seq-length", "64", "--doc-stride", "24"],
        ...["--max-query-length", "16", "--n-best-size", "5", "--output-dir", run],
      ]);
      await checkTrainingFiles(run, 2);
      await checkSquadPredictions(run, await squadIds(file), 5, false);
      const r = await readJson(join(run, "eval_results.json"));
      assert.equal(r.task, "squad");
      assert.deepEqual(Object.keys(r.after.dev).sort(), ["exact_match", "f1"]);
      assert.ok(r.after.dev.f1 >= 0 && r.after.dev.f1 <= 100);
      await assert.rejects(Deno.stat(join(run, "null_odds.json")), Deno.errors.NotFound);
      const cfg = await readJson(join(run, "ckpt_2/config.json"));
      assert.deepEqual(cfg.architectures, ["BertForQuestionAnswering"]);
    }),
});

Deno.test({
  name: "finetune CLI: SQuAD v2.0 with --version-2-with-negative writes null_odds and the v2 scores",
  ignore: !gpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const file = join(FIX, "squad/tiny-v2.0.json"), run = join(dir, "run");
      await finetune(dir, [
        ...["--task", "squad", "--version_2_with_negative", "--do-train", "--do-eval", "--do-predict"],
        ...["--train-file", file, "--predict-file", file, "--max-seq-length", "64", "--doc-stride", "24"],
        ...["--max-query-length", "16", "--n-best-size", "5", "--output-dir", run],
      ]);
      await checkTrainingFiles(run, 2);
      const ids = await squadIds(file);
      await checkSquadPredictions(run, ids, 5, true);
      const odds = await readJson(join(run, "null_odds.json"));
      assert.deepEqual(Object.keys(odds).sort(), [...ids].sort());
      for (const id of ids) assert.ok(Number.isFinite(odds[id]), id);
      const r = await readJson(join(run, "eval_results.json"));
      for (
        const k of ["exact", "f1", "total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
      ) {
        assert.ok(Number.isFinite(r.after.dev[k]), `${k} missing`);
      }
      // The fixture has answerable and unanswerable questions: both splits are scored.
      for (
        const k of ["HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1", "NoAns_total"]
      ) {
        assert.ok(Number.isFinite(r.after.dev[k]), `${k} missing`);
      }
      assert.equal(r.after.dev.total, r.after.dev.HasAns_total + r.after.dev.NoAns_total);
    }),
});

const GLUE_CASES = [
  { task: "mrpc", dir: "MRPC", metrics: ["accuracy", "f1"], labels: ["0", "1"], extra: [] as string[] },
  { task: "cola", dir: "CoLA", metrics: ["accuracy", "mcc"], labels: ["0", "1"], extra: [] },
  // Mixed precision with dynamic loss scaling, and two micro-batches per update, on the same path.
  {
    task: "sst-2",
    dir: "SST-2",
    metrics: ["accuracy"],
    labels: ["0", "1"],
    extra: ["--precision", "fp16", "--gradient_accumulation_steps", "2"],
  },
];

for (const c of GLUE_CASES) {
  Deno.test({
    name: `finetune CLI: GLUE ${c.dir} ${c.extra.join(" ")}`.trimEnd(),
    ignore: !gpu.ctx,
    fn: () =>
      withTemp(async (dir) => {
        const data = join(FIX, "glue", c.dir), run = join(dir, "run");
        await finetune(dir, [
          ...["--task_name", c.dir, "--data_dir", data, "--do_train", "--do_eval", "--do_predict"],
          ...["--max_seq_length", "32", "--output_dir", run, "--log-freq", "1", ...c.extra],
        ]);
        await checkTrainingFiles(run, 2);
        const r = await readJson(join(run, "eval_results.json"));
        assert.equal(r.task, c.task);
        for (const phase of ["before", "after"]) {
          assert.deepEqual(Object.keys(r[phase].dev).sort(), c.metrics);
        }
        assert.ok(r.majority_baseline.dev > 0 && r.majority_baseline.dev <= 1);
        await checkTsv(
          join(run, "predictions_test.tsv"),
          await testRows(join(data, "test.tsv")),
          (l) => c.labels.includes(l),
        );
        const metrics = (await Deno.readTextFile(join(run, "metrics.jsonl"))).trim().split("\n").map((l) =>
          JSON.parse(l)
        );
        assert.deepEqual(metrics.map((m) => m.step), [1, 2]);
        if (c.extra.includes("fp16")) {
          // Dynamic loss scaling is on: the scale starts at 2^16 (and halves on an overflowing step).
          assert.ok(metrics.every((m) => m.loss_scale >= 1 && m.loss_scale <= 2 ** 16), "loss scale");
          assert.ok(metrics.some((m) => m.loss_scale > 1), "no loss scaling in fp16");
        }
        const cfg = await readJson(join(run, "ckpt_2/config.json"));
        assert.deepEqual(cfg.architectures, ["BertForSequenceClassification"]);
      }),
  });
}

Deno.test({
  name: "finetune CLI: GLUE STS-B is a regression with Pearson and Spearman, scores in the TSV",
  ignore: !gpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const data = join(FIX, "glue/STS-B"), run = join(dir, "run");
      await finetune(dir, [
        ...["--task", "sts-b", "--data-dir", data, "--do-train", "--do-eval", "--do-predict"],
        ...["--max-seq-length", "32", "--output-dir", run],
      ]);
      await checkTrainingFiles(run, 2);
      const r = await readJson(join(run, "eval_results.json"));
      assert.deepEqual(Object.keys(r.after.dev).sort(), ["pearson", "spearmanr"]);
      for (const v of Object.values(r.after.dev)) assert.ok(Math.abs(v as number) <= 1 + 1e-9);
      assert.equal(r.majority_baseline, undefined, "a regression has no majority class");
      await checkTsv(
        join(run, "predictions_test.tsv"),
        await testRows(join(data, "test.tsv")),
        (l) => /^-?\d+\.\d{3}$/.test(l),
      );
      const cfg = await readJson(join(run, "ckpt_2/config.json"));
      assert.equal(cfg.num_labels ?? Object.keys(cfg.id2label ?? {}).length, 1);
    }),
});

Deno.test({
  name: "finetune CLI: GLUE MNLI evaluates matched and mismatched dev sets and predicts both test sets",
  ignore: !gpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const data = join(FIX, "glue/MNLI"), run = join(dir, "run");
      await finetune(dir, [
        ...["--task", "mnli", "--data-dir", data, "--do-train", "--do-eval", "--do-predict"],
        ...["--max-seq-length", "32", "--output-dir", run],
      ]);
      await checkTrainingFiles(run, 2);
      const r = await readJson(join(run, "eval_results.json"));
      assert.deepEqual(Object.keys(r.after).sort(), ["dev_matched", "dev_mismatched"]);
      for (const set of ["dev_matched", "dev_mismatched"]) {
        assert.deepEqual(Object.keys(r.after[set]), ["accuracy"]);
        assert.ok(r.majority_baseline[set] > 0);
      }
      for (const split of ["test_matched", "test_mismatched"]) {
        await checkTsv(
          join(run, `predictions_${split}.tsv`),
          await testRows(join(data, `${split}.tsv`)),
          (l) => ["contradiction", "entailment", "neutral"].includes(l),
        );
      }
      const cfg = await readJson(join(run, "ckpt_2/config.json"));
      assert.equal(Object.keys(cfg.id2label).length, 3);
    }),
});
