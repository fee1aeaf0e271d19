/** `deno task infer` as a user runs it: a subprocess, its output file, its exit code and its messages. */
import assert from "node:assert/strict";
import { cliEnv, ROOT, runCli, withTemp } from "../util/cli.ts";

import { readSafetensorsFile, toFloat64 } from "../../model_io/safetensors.ts";

const infer = (...args: string[]) => runCli("infer.ts", args);

const FX = `${ROOT}tests/fixtures/hf-tiny/`;

Deno.test("infer writes Hugging Face outputs that match the fixture (qa head, batch 3)", () =>
  withTemp(async (dir) => {
    const out = ["--output", `${dir}/o.safetensors`, ..."--batch-size 3 --backend reference".split(" ")];
    const r = await infer("--checkpoint", `${FX}qa`, "--input", `${FX}inputs.jsonl`, ...out);
    assert.equal(r.code, 0, r.stderr);
    const got = (await readSafetensorsFile(`${dir}/o.safetensors`)).tensors;
    const want = (await readSafetensorsFile(`${FX}expected.safetensors`)).tensors;
    assert.deepEqual([...got.keys()].sort(), ["end_logits", "start_logits"]);
    for (const name of ["start_logits", "end_logits"]) {
      const a = toFloat64(got.get(name)!), e = toFloat64(want.get(`qa.${name}`)!);
      assert.deepEqual(got.get(name)!.shape, [4, 12]);
      const scale = Math.max(...e.map(Math.abs));
      e.forEach((v, i) => assert.ok(Math.abs(a[i] - v) <= 1e-5 * scale, `${name}[${i}]`));
    }
    assert.match(r.stdout, /4 rows, head qa/);
    const batchPastTheRows = ["--checkpoint", `${FX}qa`, ...out.slice(0, 2), "--batch-size", "100000000"];
    assert.equal((await infer(...batchPastTheRows, "--backend", "reference")).code, 0); // not refused as too big
  }));

Deno.test("deno task infer with no arguments runs the built-in default on auto's backend", () =>
  withTemp(async (dir) => {
    // Through the task, so auto sees what a user's run sees (the CPU backend needs its --allow-run).
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["task", "-q", "infer", "--output", `${dir}/d.safetensors`],
      cwd: ROOT,
      env: cliEnv(),
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    assert.match(stderr, /^backend: \w+ \(auto: /m);
    const t = (await readSafetensorsFile(`${dir}/d.safetensors`)).tensors;
    assert.deepEqual(t.get("prediction_logits")!.shape, [4, 12, 99]);
    assert.deepEqual(t.get("seq_relationship_logits")!.shape, [4, 2]);
  }));

Deno.test("--help documents every flag", async () => {
  const r = await infer("--help");
  assert.equal(r.code, 0);
  for (const flag of "--checkpoint --input --output --head --batch-size --backend --precision".split(" ")) {
    assert.ok(r.stdout.includes(flag), flag);
  }
});

const BAD: [string, string[], RegExp, ((dir: string) => Promise<void>)?][] = [
  ["unknown flag", ["--bogus"], /Unknown option '--bogus'/],
  ["bad batch size", ["--batch-size", "0"], /--batch-size must be a positive integer/],
  ["unknown head", ["--head", "ner"], /--head must be one of pretraining, classification, qa/],
  ["f64 off the interpreter", ["--precision", "f64"], /--precision applies to --backend reference/],
  ["missing checkpoint", ["--checkpoint", "/nonexistent"], /--checkpoint \/nonexistent: no such folder/],
  ["checkpoint is a file", ["--checkpoint", `${ROOT}README.md`], /README\.md: not a folder/],
  ["an input that never ends", ["--input", "/dev/zero"], /input \/dev\/zero: over 511 MiB, the most one/],
  [
    "token id outside the vocabulary",
    ["--input", "IN"],
    /IN:2: input_ids\[1\] = 99 is outside the vocabulary \[0, 99\)/,
    (f) => Deno.writeTextFile(f, '{"input_ids":[2,5]}\n{"input_ids":[2,99]}\n'),
  ],
  [
    "malformed JSONL",
    ["--input", "IN"],
    /IN:1: not valid JSON/,
    (f) => Deno.writeTextFile(f, '{"input_ids":[2,5]\n'),
  ],
  [
    "too long for the positions",
    ["--input", "IN"],
    /65 tokens exceed max_position_embeddings 64/,
    (f) => Deno.writeTextFile(f, JSON.stringify({ input_ids: new Array(65).fill(3) }) + "\n"),
  ],
  [
    "mismatched lengths",
    ["--input", "IN"],
    /attention_mask has 1 entries but input_ids has 2/,
    (f) => Deno.writeTextFile(f, '{"input_ids":[2,5],"attention_mask":[1]}\n'),
  ],
  [
    "malformed config",
    ["--checkpoint", "DIR"],
    /DIR\/config\.json: field 'hidden_size' must be a positive integer/,
    async (d) => {
      await Deno.mkdir(d);
      await Deno.writeTextFile(
        `${d}/config.json`,
        JSON.stringify({
          vocab_size: 9,
          hidden_size: -1,
          num_hidden_layers: 1,
          num_attention_heads: 1,
          intermediate_size: 4,
        }),
      );
    },
  ],
  ["checkpoint of another head", ["--checkpoint", `${FX}classification`, "--head", "qa"], /another head/],
];

for (const [what, args, message, setup] of BAD) {
  Deno.test(`infer refuses ${what} with one line and exit code 1`, () =>
    withTemp(async (dir) => {
      const path = `${dir}/x`;
      if (setup) await setup(path);
      const r = await infer(
        ...args.map((a) => a === "IN" || a === "DIR" ? path : a),
        "--output",
        `${dir}/o.st`,
      );
      assert.equal(r.code, 1, r.stderr);
      const text = r.stderr.replaceAll(path, args.includes("DIR") ? "DIR" : "IN");
      const lines = text.trim().split("\n").filter((l) => !l.startsWith("no --checkpoint"));
      assert.equal(lines.length, 1, `one line, no stack trace: ${r.stderr}`);
      assert.match(lines[0], /^error: /);
      assert.match(lines[0], message);
      await assert.rejects(() => Deno.stat(`${dir}/o.st`), "nothing is written");
    }));
}

Deno.test("--input - and /dev/stdin read standard input; an output on a device file is one line", () =>
  withTemp(async (dir) => {
    const fromFx = ["--checkpoint", `${FX}qa`, "--backend", "reference"];
    const run = (input: string, out: string) =>
      runCli("infer.ts", [...fromFx, "--input", input, "--output", out], undefined, `${FX}inputs.jsonl`);
    await infer(...fromFx, "--input", `${FX}inputs.jsonl`, "--output", `${dir}/file.st`);
    for (const input of ["-", "/dev/stdin"]) {
      const r = await run(input, `${dir}/in.st`);
      assert.equal(r.code, 0, r.stderr);
      const [a, b] = [await Deno.readFile(`${dir}/in.st`), await Deno.readFile(`${dir}/file.st`)];
      assert.deepEqual(a, b, `${input}: the same outputs as from the file`);
    }
    const r = await run("-", "/dev/full");
    assert.equal(r.code, 1);
    assert.match(
      r.stderr.trim(),
      /^error: \/dev\/full: [^\n]*a \/dev, \/proc or \/sys path, closed by Deno's permissions\)$/,
    );
  }));
