/**
 * `deno task finetune` given bad input, as a user would: each case is one line on stderr naming the file
 * (and line where there is one), exit code 1, and no output folder. These stop before anything is
 * compiled, so the CPU interpreter backend suffices.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { exists } from "../../training/checkpoint.ts";
import { ROOT, runCli, withTemp } from "../util/cli.ts";

const PERMS = ["--allow-read", "--allow-write", "--allow-env", "--allow-ffi", "--allow-run"];
const GLUE = join(ROOT, "tests/fixtures/finetune/glue");
const SQUAD = join(ROOT, "tests/fixtures/finetune/squad/tiny-v1.1.json");

async function refused(dir: string, args: string[], re: RegExp): Promise<void> {
  const out = join(dir, "run");
  const r = await runCli("finetune.ts", ["--backend", "reference", "--output-dir", out, ...args], PERMS);
  const lines = r.stderr.trim().split("\n").filter((l) => l.startsWith("error"));
  assert.equal(r.code, 1, `exit ${r.code}: ${r.stderr}`);
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0], re);
  assert.ok(!(await exists(out)), "the output folder was created");
}

Deno.test("finetune: a SQuAD answer that is not at its offset names the file and line", () =>
  withTemp(async (dir) => {
    const j = JSON.parse(await Deno.readTextFile(SQUAD));
    const qa = j.data[0].paragraphs[0].qas[0];
    qa.answers[0].answer_start += 1; // the text no longer starts there
    const bad = join(dir, "bad.json");
    await Deno.writeTextFile(bad, JSON.stringify(j, null, 1));
    const text = await Deno.readTextFile(bad);
    const line = text.slice(0, text.indexOf(JSON.stringify(qa.id))).split("\n").length;
    await refused(
      dir,
      ["--task", "squad", "--do_train", "--train_file", bad],
      new RegExp(`bad\\.json:${line}: .*not at answer_start`),
    );
  }));

Deno.test("finetune: a GLUE folder without its dev file", () =>
  withTemp(async (dir) => {
    const mrpc = join(dir, "MRPC");
    await Deno.mkdir(mrpc);
    await Deno.copyFile(join(GLUE, "MRPC/train.tsv"), join(mrpc, "train.tsv"));
    await refused(dir, ["--task", "mrpc", "--data-dir", mrpc], /MRPC\/dev\.tsv/);
  }));

Deno.test("finetune: a label outside the task's set names the file and line", () =>
  withTemp(async (dir) => {
    const sst = join(dir, "SST-2");
    await Deno.mkdir(sst);
    await Deno.copyFile(join(GLUE, "SST-2/train.tsv"), join(sst, "train.tsv"));
    await Deno.writeTextFile(join(sst, "dev.tsv"), "sentence\tlabel\ngood film\t1\nbad film\t2\n");
    await refused(dir, ["--task", "sst-2", "--data-dir", sst], /SST-2\/dev\.tsv:3: label '2' is not one of/);
    const train = join(dir, "t.csv"), dev = join(dir, "d.jsonl");
    await Deno.writeTextFile(train, "text,label\ngreat,pos\nawful,neg\nfine,pos\n");
    await Deno.writeTextFile(dev, '{"text":"ok","label":"pos"}\n{"text":"meh","label":"neutral"}\n');
    await refused(
      dir,
      ["--task", "classify", "--train-file", train, "--predict-file", dev],
      /d\.jsonl:2: label 'neutral'/,
    );
  }));

Deno.test("finetune: an empty file", () =>
  withTemp(async (dir) => {
    const empty = join(dir, "empty.tsv");
    await Deno.writeTextFile(empty, "");
    await refused(dir, ["--task", "classify", "--train-file", empty], /empty\.tsv: empty file/);
    const emptyJson = join(dir, "empty.json");
    await Deno.writeTextFile(emptyJson, "");
    await refused(dir, ["--task", "squad", "--do-train", "--train-file", emptyJson], /empty\.json/);
  }));

Deno.test("finetune: a checkpoint whose head does not match the task", () =>
  withTemp(async (dir) => {
    const qa = join(ROOT, "tests/fixtures/hf-tiny/qa");
    await refused(
      dir,
      ["--task", "sentiment", "--init-checkpoint", qa, "--train-limit", "8", "--eval-limit", "8"],
      /hf-tiny\/qa\/model\.safetensors: holds a question-answering head, but --task needs a sequence-classification head/,
    );
  }));

Deno.test("finetune: --help explains the options", async () => {
  const r = await runCli("finetune.ts", ["--help"], PERMS);
  assert.equal(r.code, 0);
  for (
    const flag of [
      "--init-checkpoint",
      "--doc-stride",
      "--null-score-diff-threshold",
      "--version-2-with-negative",
    ]
  ) {
    assert.ok(r.stdout.includes(flag), flag);
  }
});
