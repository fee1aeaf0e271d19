/**
 * `deno task finetune` given bad input, as a user would: each case is one line on stderr naming the file
 * (and line where there is one), exit code 1, and no output folder. These stop before anything is
 * compiled, so the CPU interpreter backend suffices.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { exists } from "../../training/checkpoint.ts";
import { readSafetensorsFile, toFloat32 } from "../../model_io/safetensors.ts";
import { ROOT, runCli, withTemp } from "../util/cli.ts";
import { testCpu } from "../util/cpu_check.ts";

const PERMS = ["--allow-read", "--allow-write", "--allow-env", "--allow-ffi", "--allow-run"];
const GLUE = join(ROOT, "tests/fixtures/finetune/glue");
const SQUAD = join(ROOT, "tests/fixtures/finetune/squad/tiny-v1.1.json");

async function refused(dir: string, args: string[], re: RegExp, perms = PERMS): Promise<void> {
  const out = join(dir, "run");
  const r = await runCli("finetune.ts", ["--backend", "reference", "--output-dir", out, ...args], perms);
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
    const flag of "--init-checkpoint --doc-stride --null-score-diff-threshold --version-2-with-negative"
      .split(" ")
  ) {
    assert.ok(r.stdout.includes(flag), flag);
  }
});

const cpu = await testCpu();
const INIT = ["--init-checkpoint", join(ROOT, "tests/fixtures/hf-tiny/pretraining")];
const LIMITS = "--train-limit 8 --eval-limit 8".split(" ");

Deno.test("finetune: a batch too large is refused before any work; out of memory names its batch flags", () =>
  withTemp(async (dir) => {
    // ~150 GB by the estimate (each tensor under 2^31 elements): measured memory refuses it, no measure not.
    const big = [...INIT, ...LIMITS, "--train-batch-size", "120000"];
    const sys = [...PERMS, "--allow-sys=systemMemoryInfo"]; // as deno task finetune measures memory
    await refused(dir, big, /pretraining: training needs about .* but this machine has .* available/, sys);
    if (!cpu.ctx) return;
    // Unmeasured, the CPU backend's arena is allocated, which fails under a 64 GB address-space limit.
    const args = [...PERMS, `${ROOT}cli/finetune.ts`, ...big, "--backend", "cpu", "--output-dir", dir + "/r"];
    const limited = ["-c", 'ulimit -v 67108864 && exec "$@"', "sh", Deno.execPath(), "run", ...args];
    const r = await new Deno.Command("bash", { args: limited, stdout: "null", stderr: "piped" }).output();
    const oom =
      /^error: out of memory \(.*\); try a smaller --train-batch-size or --eval-batch-size or model$/m;
    assert.match(new TextDecoder().decode(r.stderr), oom);
  }));

Deno.test("finetune: trainer_state.json records paths relative to the run folder", () =>
  withTemp(async (dir) => {
    const args = [...INIT, ...LIMITS, ..."--backend reference --max-steps 1".split(" "), "--output-dir"];
    assert.equal((await runCli("finetune.ts", [...args, dir + "/run"], PERMS)).code, 0);
    const state = JSON.parse(await Deno.readTextFile(join(dir, "run/ckpt_1/trainer_state.json")));
    // No absolute path (a relative one may still spell ROOT's folders after its ../ steps).
    for (const p of [dir, ROOT]) assert.ok(!JSON.stringify(state).includes(`"${p}`), `${p} recorded`);
    assert.equal(state.args.outputDir, ".");
    assert.equal(join(dir, "run", state.args.initCheckpoint), INIT[1]);
  }));

Deno.test("finetune --init-weight-rms: the weight matrices start at that RMS, the rest as saved", () =>
  withTemp(async (dir) => {
    await refused(dir, [...INIT, "--init-weight-rms", "0"], /--init-weight-rms must be a positive number/);
    const args = [
      ...INIT,
      ...LIMITS,
      ..."--backend reference --max-steps 1 --learning-rate 1e-12".split(" "),
    ];
    const r = await runCli(
      "finetune.ts",
      [...args, "--init-weight-rms", "0.05", "--output-dir", dir + "/r"],
      PERMS,
    );
    assert.equal(r.code, 0, r.stderr);
    const saved = (await readSafetensorsFile(join(INIT[1], "model.safetensors"))).tensors;
    const after = (await readSafetensorsFile(join(dir, "r/ckpt_1/model.safetensors"))).tensors;
    let matrices = 0;
    for (const [name, t] of [...saved].filter(([n]) => !n.startsWith("cls."))) {
      const [x, y] = [toFloat32(t), toFloat32(after.get(name)!)];
      const scale = t.shape.length === 2 ? 0.05 / Math.sqrt(x.reduce((a, v) => a + v * v, 0) / x.length) : 1;
      matrices += t.shape.length === 2 ? 1 : 0;
      assert.ok(scale !== 1 || t.shape.length === 1, name); // no fixture matrix is at RMS 0.05 already
      x.forEach((v, i) =>
        assert.ok(Math.abs(y[i] - v * scale) <= 1e-6, `${name}[${i}]: ${y[i]} vs ${v * scale}`)
      );
    }
    assert.equal(matrices, 2 * 6 + 3 + 1); // per layer Q, K, V, O and the FFN's two; 3 embeddings; the pooler
  }));
