/**
 * Commands run as a hostile user would (issue 13), each through the command line: outputs pointed at
 * inputs or at someone's files, a file where a folder goes and the reverse, damaged checkpoints, absurd
 * configs and malformed numbers. Each must end in one `error: ...` line naming the path and the cause,
 * exit code 1, and the user's files byte for byte as they were.
 */
import assert from "node:assert/strict";
import { ROOT, runCli, withTemp } from "../util/cli.ts";
import { replaceDir } from "../../model_io/outputs.ts";
import { ONE_LAYER } from "../util/bert_steps.ts";

const FX = `${ROOT}tests/fixtures/hf-tiny/`;

/** One error line, exit 1, matching `re`. */
function refused(r: { code: number; stdout: string; stderr: string }, re: RegExp): void {
  assert.equal(r.code, 1, `exit code (stderr: ${r.stderr})`);
  const lines = r.stderr.trim().split("\n");
  assert.equal(lines.length, 1, `one line expected:\n${r.stderr}`);
  assert.match(lines[0], /^error: /);
  assert.match(lines[0], re);
}

async function copyDir(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for await (const e of Deno.readDir(from)) {
    if (e.isFile) await Deno.copyFile(`${from}/${e.name}`, `${to}/${e.name}`);
  }
}

async function snapshot(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for await (const e of Deno.readDir(dir)) {
    out.set(e.name, e.isFile ? new TextDecoder().decode(await Deno.readFile(`${dir}/${e.name}`)) : "<dir>");
  }
  return out;
}

const MICRO = { ...ONE_LAYER, hidden_size: 16, intermediate_size: 32 };

Deno.test("compile --out a folder of user files refuses and deletes nothing", () =>
  withTemp(async (dir) => {
    await Deno.writeTextFile(`${dir}/model.json`, JSON.stringify(MICRO));
    await Deno.mkdir(`${dir}/models`);
    await Deno.writeTextFile(`${dir}/models/mine.ts`, "precious\n");
    const r = await runCli("compile.ts", [`${dir}/model.json`, "--seq-len", "16", "--out", `${dir}/models`]);
    refused(r, /--out .*models: .* holds files that are not a folder written by deno task compile/);
    assert.equal(await Deno.readTextFile(`${dir}/models/mine.ts`), "precious\n");
    // A file where the folder goes, too.
    await Deno.writeTextFile(`${dir}/f`, "a file\n");
    refused(
      await runCli("compile.ts", [`${dir}/model.json`, "--seq-len", "16", "--out", `${dir}/f`]),
      /is a file, not a folder/,
    );
    assert.equal(await Deno.readTextFile(`${dir}/f`), "a file\n");
  }));

Deno.test("compile with no --out rewrites its target's folder alone and keeps the other targets' plans", () =>
  withTemp(async (dir) => {
    await Deno.writeTextFile(`${dir}/bert-micro.json`, JSON.stringify(MICRO));
    const compile = (...args: string[]) =>
      new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", `${ROOT}cli/compile.ts`, "bert-micro.json", "--seq-len", "16", ...args],
        cwd: dir,
        env: { NO_COLOR: "1" },
      }).output();
    const out = `${dir}/kernels_generated/bert-micro-train-fp16-b8-s16-p20`; // not the default shape
    let r = await compile("--target", "cuda-sm90,webgpu-gpu");
    assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
    const cuda = await snapshot(`${out}/cuda-sm90`), wgsl = await snapshot(`${out}/webgpu-gpu`);
    r = await compile(); // the headline form: no --out, no --target (cuda-sm90)
    assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
    assert.deepEqual(await snapshot(`${out}/cuda-sm90`), cuda, "the CUDA plan changed");
    assert.deepEqual(await snapshot(`${out}/webgpu-gpu`), wgsl, "the WebGPU plan was rewritten or dropped");
    const plan = JSON.parse(await Deno.readTextFile(`${out}/webgpu-gpu/plan.json`));
    assert.deepEqual([plan.target, plan.language], ["webgpu-gpu", "wgsl"]);
  }));

Deno.test("infer --output over the checkpoint's files or the input refuses; the files stay", () =>
  withTemp(async (dir) => {
    await copyDir(`${FX}pretraining`, `${dir}/ck`);
    await Deno.copyFile(`${FX}inputs.jsonl`, `${dir}/in.jsonl`);
    const before = await snapshot(`${dir}/ck`);
    const input = await Deno.readTextFile(`${dir}/in.jsonl`);
    for (const target of [`${dir}/ck/model.safetensors`, `${dir}/ck/config.json`, `${dir}/in.jsonl`]) {
      const io = ["--input", `${dir}/in.jsonl`, "--output", target];
      const r = await runCli("infer.ts", ["--checkpoint", `${dir}/ck`, ...io]);
      refused(r, /would overwrite the input/);
    }
    assert.deepEqual(await snapshot(`${dir}/ck`), before);
    assert.equal(await Deno.readTextFile(`${dir}/in.jsonl`), input);
    // A user's file that is no output of infer, and a folder where the file goes.
    await Deno.writeTextFile(`${dir}/notes.txt`, "mine\n");
    refused(
      await runCli("infer.ts", ["--checkpoint", `${dir}/ck`, "--output", `${dir}/notes.txt`]),
      /exists and is not a safetensors file written by deno task infer/,
    );
    assert.equal(await Deno.readTextFile(`${dir}/notes.txt`), "mine\n");
    refused(await runCli("infer.ts", ["--checkpoint", `${dir}/ck`, "--output", dir]), /is a folder/);
    // Its own earlier output is replaced.
    const ok = await runCli("infer.ts", ["--checkpoint", `${dir}/ck`, "--output", `${dir}/o.safetensors`]);
    assert.equal(ok.code, 0, ok.stderr);
    const again = await runCli("infer.ts", ["--checkpoint", `${dir}/ck`, "--output", `${dir}/o.safetensors`]);
    assert.equal(again.code, 0, again.stderr);
  }));

Deno.test("tokenize --output equal to --input refuses and keeps the text", () =>
  withTemp(async (dir) => {
    await Deno.writeTextFile(`${dir}/t.txt`, "hello world\n");
    refused(
      await runCli("tokenize.ts", ["--input", `${dir}/t.txt`, "--output", `${dir}/t.txt`]),
      /would overwrite the input/,
    );
    assert.equal(await Deno.readTextFile(`${dir}/t.txt`), "hello world\n");
  }));

Deno.test("infer refuses NaN weights naming the tensor, and a config claiming 10^6 layers at once", () =>
  withTemp(async (dir) => {
    await copyDir(`${FX}pretraining`, `${dir}/nan`);
    const bytes = await Deno.readFile(`${dir}/nan/model.safetensors`);
    const n = Number(new DataView(bytes.buffer).getBigUint64(0, true));
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
    const name = "bert.embeddings.LayerNorm.weight";
    assert.equal(header[name].dtype, "F32");
    new DataView(bytes.buffer).setFloat32(8 + n + header[name].data_offsets[0], NaN, true);
    await Deno.writeFile(`${dir}/nan/model.safetensors`, bytes);
    refused(
      await runCli("infer.ts", ["--checkpoint", `${dir}/nan`, "--output", `${dir}/o.safetensors`]),
      /non-finite weights.*bert\.embeddings\.LayerNorm\.weight holds NaN/,
    );

    await copyDir(`${FX}pretraining`, `${dir}/huge`);
    const cfg = JSON.parse(await Deno.readTextFile(`${dir}/huge/config.json`));
    await Deno.writeTextFile(`${dir}/huge/config.json`, JSON.stringify({ ...cfg, num_hidden_layers: 1e6 }));
    const t0 = performance.now();
    refused(
      await runCli("infer.ts", ["--checkpoint", `${dir}/huge`, "--output", `${dir}/o.safetensors`]),
      /num_hidden_layers is 1000000 but .* holds 2 layers/,
    );
    assert.ok(performance.now() - t0 < 20_000);
    await Deno.stat(`${dir}/o.safetensors`).then(() => assert.fail("an output was written"), () => {});
  }));

Deno.test("compile refuses sizes past this machine's memory or 32-bit indices, and a device as its model", () =>
  withTemp(async (dir) => {
    await Deno.writeTextFile(`${dir}/m.json`, JSON.stringify({ ...MICRO, num_hidden_layers: 1e6 }));
    const args = [`${dir}/m.json`, "--seq-len", "16", "--out", `${dir}/k`];
    const t0 = performance.now();
    // As the task runs it (memory measured), and without the permission to measure (a fixed ceiling).
    const perms = ["--allow-read", "--allow-write", "--allow-env", "--allow-sys=systemMemoryInfo"];
    refused(
      await runCli("compile.ts", args, perms),
      /m\.json: compiling a training step needs about .* but this machine has .* available/,
    );
    refused(
      await runCli("compile.ts", args),
      /compiling a training step needs about .* but no machine this runs on has over/,
    );
    const wide = ["models/bert-tiny.ts", "--batch-size", "100000", "--out", `${dir}/k`];
    refused(await runCli("compile.ts", wide), /vocabulary logits would hold 6\.10e\+10 elements .* 32-bit/);
    refused(await runCli("compile.ts", ["/dev/zero"]), /\/dev\/zero: not a regular file/);
    assert.ok(performance.now() - t0 < 20_000);
  }));

Deno.test("numeric flags are strict, negative values are not 'ambiguous', and ranges are stated", async () => {
  const cases: [string, string[], RegExp][] = [
    ["infer.ts", ["--batch-size", "0x10"], /--batch-size must be a positive integer, got '0x10'/],
    ["infer.ts", ["--batch-size", "1e300"], /--batch-size must be a positive integer, got '1e300'/],
    ["infer.ts", ["--batch-size", "-3"], /--batch-size must be a positive integer, got '-3'/],
    ["infer.ts", ["--batch-size", "2.5"], /--batch-size must be a positive integer/],
    ["train.ts", ["--seed", "-5"], /--seed must be an integer from 0 to 4294967295, got '-5'/],
    ["train.ts", ["--learning-rate", "-1"], /--learning-rate must be a number > 0, got '-1'/],
    ["train.ts", ["--warmup-proportion", "0x1"], /--warmup-proportion must be a number >= 0 and < 1/],
    ["train.ts", ["--weight-decay", "1.5"], /--weight-decay must be a number >= 0 and < 1, got '1\.5'/],
    ["train.ts", ["--recipe", "fast"], /--recipe must be one of sentiment, got 'fast'/],
    ["compile.ts", ["--seq-len", "1e3"], /--seq-len must be a positive integer, got '1e3'/],
  ];
  for (const [script, args, re] of cases) {
    const r = await runCli(script, args);
    refused(r, re);
    assert.doesNotMatch(r.stderr, /ambiguous/);
  }
});

Deno.test("prepare-data caps --workers by the cores and refuses a folder of other files", () =>
  withTemp(async (dir) => {
    const lines = ["the cat sat on the mat .", "a dog ran .", "", "big red ball .", "over the hill .", ""];
    await Deno.writeTextFile(`${dir}/in.txt`, Array(10).fill(lines.join("\n")).join("\n"));
    const shape = "--max-seq-length 16 --max-predictions-per-seq 3 --quiet".split(" ");
    const args = ["--input", `${dir}/in.txt`, ...shape];
    const t0 = performance.now();
    const r = await runCli("prepare_data.ts", [...args, "--output", `${dir}/o`, "--workers", "1000"]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /--workers 1000: this machine has \d+ cores; using \d+/);
    assert.ok(performance.now() - t0 < 30_000);
    refused(
      await runCli("prepare_data.ts", [...args, "--output", dir]),
      /holds files that are not a shard folder of deno task prepare-data/,
    );
    assert.ok((await Deno.readTextFile(`${dir}/in.txt`)).startsWith("the cat"));
  }));

Deno.test("a SIGTERM while a folder is written leaves the old folder in place and no temporary one", () =>
  withTemp(async (dir) => {
    await Deno.mkdir(`${dir}/k`);
    await Deno.writeTextFile(`${dir}/k/plan.json`, "old");
    // The signal arrives mid-fill, as one sent to compile while it writes its kernels does.
    const fill = async (tmp: string) => {
      await Deno.writeTextFile(`${tmp}/plan.json`, "new");
      Deno.kill(Deno.pid, "SIGTERM");
      await new Promise((r) => setTimeout(r, 50));
    };
    await assert.rejects(
      replaceDir(`${dir}/k`, fill),
      /k: stopped by SIGTERM while writing; nothing was changed/,
    );
    assert.equal(await Deno.readTextFile(`${dir}/k/plan.json`), "old");
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["k"]);
  }));
