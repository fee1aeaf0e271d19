/**
 * `deno task train` run as a hostile user would (issue 13), on the reference backend with a micro BERT
 * (hidden 16, one layer) and a few hundred instances, so each run takes seconds: a folder of user files as
 * the output, two trainers on one folder, signals, fp16 overflow at a checkpoint step, shards made for a
 * larger vocabulary, a damaged checkpoint given to infer and --init-checkpoint.
 */
import assert from "node:assert/strict";
import { ROOT, withTemp } from "../util/cli.ts";

const MICRO = {
  vocab_size: 30522,
  hidden_size: 16,
  num_hidden_layers: 1,
  num_attention_heads: 2,
  intermediate_size: 32,
  hidden_act: "gelu",
  hidden_dropout_prob: 0.1,
  attention_probs_dropout_prob: 0.1,
  max_position_embeddings: 64,
  type_vocab_size: 2,
  initializer_range: 0.02,
  layer_norm_eps: 1e-12,
};
// As `deno task train` runs it (deno.json).
const PERMS = [
  "--allow-read",
  "--allow-write",
  "--allow-env",
  "--allow-run",
  "--allow-ffi",
  "--allow-sys=systemMemoryInfo",
];

function text(docs: number): string {
  const words = "the cat sat on a mat and dog ran to house with big red ball over hill under tree".split(" ");
  let seed = 7;
  const pick = () => words[(seed = (seed * 1103515245 + 12345) % 2 ** 31) % words.length];
  const out: string[] = [];
  for (let d = 0; d < docs; d++) {
    for (let s = 0; s < 6; s++) out.push(Array.from({ length: 4 + (d + s) % 7 }, pick).join(" ") + " .");
    out.push("");
  }
  return out.join("\n");
}

function command(script: string, args: string[]): Deno.Command {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", ...PERMS, `${ROOT}cli/${script}`, ...args],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  });
}

async function run(script: string, args: string[]) {
  const out = await command(script, args).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

function refused(r: { code: number; stderr: string }, re: RegExp): void {
  assert.equal(r.code, 1, r.stderr);
  const lines = r.stderr.trim().split("\n");
  assert.match(lines.at(-1)!, /^error: /, r.stderr);
  assert.match(lines.at(-1)!, re);
}

/** A model file and shards in `dir` (vocabulary `vocab`); returns the train flags that use them. */
async function setup(dir: string, vocab = 30522): Promise<string[]> {
  await Deno.writeTextFile(`${dir}/micro.json`, JSON.stringify({ ...MICRO, vocab_size: vocab }));
  await Deno.writeTextFile(`${dir}/text.txt`, text(20));
  const p = await run("prepare_data.ts", [
    "--input",
    `${dir}/text.txt`,
    "--output",
    `${dir}/shards`,
    "--max-seq-length",
    "16",
    "--max-predictions-per-seq",
    "3",
    "--quiet",
  ]);
  assert.equal(p.code, 0, p.stderr);
  return [
    "--model",
    `${dir}/micro.json`,
    "--input-dir",
    `${dir}/shards`,
    "--backend",
    "reference",
    "--train-batch-size",
    "2",
  ];
}

Deno.test("train into a folder of user files refuses and leaves them", () =>
  withTemp(async (dir) => {
    const flags = await setup(dir);
    await Deno.mkdir(`${dir}/mine`);
    await Deno.writeTextFile(`${dir}/mine/metrics.jsonl`, "my notes\n");
    refused(
      await run("train.ts", [...flags, "--output-dir", `${dir}/mine`, "--max-steps", "1"]),
      /--output-dir .*mine: .* holds files that are not a training run folder/,
    );
    assert.equal(await Deno.readTextFile(`${dir}/mine/metrics.jsonl`), "my notes\n");
    assert.deepEqual([...Deno.readDirSync(`${dir}/mine`)].map((e) => e.name), ["metrics.jsonl"]);
  }));

Deno.test("fp16: steps skipped for overflow at a checkpoint step checkpoint and resume exactly", () =>
  withTemp(async (dir) => {
    // An initial loss scale of 1e38 overflows every gradient: each step is skipped (grad norm NaN).
    const flags = [
      ...await setup(dir),
      "--precision",
      "fp16",
      "--init-loss-scale",
      "1e38",
      "--max-steps",
      "3",
    ];
    const a = await run("train.ts", [...flags, "--output-dir", `${dir}/a`]);
    assert.equal(a.code, 0, a.stderr);
    const b1 = await run("train.ts", [...flags, "--output-dir", `${dir}/b`, "--steps-this-run", "1"]);
    assert.equal(b1.code, 0, b1.stderr);
    const state = JSON.parse(await Deno.readTextFile(`${dir}/b/ckpt_1/trainer_state.json`));
    assert.equal(state.train_state.gradNorm, "NaN");
    assert.equal(state.train_state.skippedSteps, 1);
    const b2 = await run("train.ts", [...flags, "--output-dir", `${dir}/b`, "--resume-from-checkpoint"]);
    assert.equal(b2.code, 0, b2.stderr);
    for (const f of ["model.safetensors", "optimizer.safetensors"]) {
      assert.deepEqual(
        await Deno.readFile(`${dir}/b/ckpt_3/${f}`),
        await Deno.readFile(`${dir}/a/ckpt_3/${f}`),
        f,
      );
    }
  }));

Deno.test("a second trainer on one folder is refused naming the first; SIGTERM stops the first at once", () =>
  withTemp(async (dir) => {
    const flags = [
      ...await setup(dir),
      "--output-dir",
      `${dir}/run`,
      "--max-steps",
      "100000",
      "--log-freq",
      "1",
    ];
    const first = command("train.ts", flags).spawn();
    try {
      const lock = `${dir}/run/.bertfuse.lock`;
      const until = Date.now() + 60_000;
      // Wait until the first run is stepping (its metrics file has a line), not just holding the lock.
      while (Date.now() < until) {
        const m = await Deno.readTextFile(`${dir}/run/metrics.jsonl`).catch(() => "");
        if (m.includes("\n")) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      const held = JSON.parse(await Deno.readTextFile(lock));
      const second = await run("train.ts", [...flags, "--resume-from-checkpoint"]);
      refused(second, new RegExp(`is in use by another run: pid ${held.pid} on .*, started `));
      const t0 = Date.now();
      first.kill("SIGTERM");
      const out = await first.output();
      const stderr = new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 0, stderr);
      assert.ok(Date.now() - t0 < 15_000, `stopped after ${Date.now() - t0} ms`);
      assert.match(stderr, /stopped at step \d+ on reference/);
      await Deno.stat(lock).then(() => assert.fail("the lock was left behind"), () => {});
    } finally {
      try {
        first.kill("SIGKILL");
      } catch { /* already gone */ }
    }
  }));

Deno.test("two Ctrl-C in quick succession quit at once without saving; the stale lock is taken over", () =>
  withTemp(async (dir) => {
    const flags = [
      ...await setup(dir),
      "--output-dir",
      `${dir}/run`,
      "--max-steps",
      "100000",
      "--log-freq",
      "1",
    ];
    const child = command("train.ts", flags).spawn();
    const until = Date.now() + 60_000;
    while (Date.now() < until) {
      const m = await Deno.readTextFile(`${dir}/run/metrics.jsonl`).catch(() => "");
      if (m.includes("\n")) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    child.kill("SIGINT");
    await new Promise((r) => setTimeout(r, 50));
    child.kill("SIGINT");
    const t0 = Date.now();
    const out = await child.output();
    assert.ok(Date.now() - t0 < 5_000);
    assert.equal(out.code, 130, "128 + SIGINT, as a shell expects");
    assert.match(new TextDecoder().decode(out.stderr), /SIGINT again: quitting now without saving/);
    // The first Ctrl-C asked for a checkpoint after the step, and the second quits 300 ms later at most
    // (training/signal_watch.ts): on a fast step the checkpoint is already written by then, and a run into
    // that directory would rightly ask for --resume-from-checkpoint. Such a checkpoint is not what this test
    // is about, so it goes; the lock file stays.
    for await (const e of Deno.readDir(`${dir}/run`)) {
      if (e.name.startsWith("ckpt_")) await Deno.remove(`${dir}/run/${e.name}`, { recursive: true });
    }
    // The killed run's lock file remains; the next run sees nobody holds it and takes over.
    const next = await run("train.ts", [...flags.slice(0, -4), "--max-steps", "1"]);
    assert.equal(next.code, 0, next.stderr);
    assert.match(next.stderr, /taking over the lock of pid \d+ .*no longer running/);
  }));

Deno.test("shards made for a larger vocabulary than the model's are refused in one line", () =>
  withTemp(async (dir) => {
    const flags = await setup(dir, 1000);
    refused(
      await run("train.ts", [...flags, "--output-dir", `${dir}/run`, "--max-steps", "1"]),
      /shards were made with a vocabulary of 30522 tokens but .*micro\.json has vocab_size 1000/,
    );
    await Deno.stat(`${dir}/run`).then(() => assert.fail("the refused run left a folder"), () => {});
  }));

Deno.test("infer and --init-checkpoint verify a training checkpoint's manifest", () =>
  withTemp(async (dir) => {
    const flags = await setup(dir);
    const t = await run("train.ts", [...flags, "--output-dir", `${dir}/run`, "--max-steps", "1"]);
    assert.equal(t.code, 0, t.stderr);
    const ck = `${dir}/run/ckpt_1`;
    const model = await Deno.readFile(`${ck}/model.safetensors`);
    model[model.length - 1] ^= 1; // one bit of the last weight
    await Deno.writeFile(`${ck}/model.safetensors`, model);
    const ids = JSON.stringify({ input_ids: [101, 2000, 102] });
    await Deno.writeTextFile(`${dir}/in.jsonl`, ids + "\n");
    refused(
      await run("infer.ts", [
        "--checkpoint",
        ck,
        "--input",
        `${dir}/in.jsonl`,
        "--output",
        `${dir}/o.safetensors`,
      ]),
      /model\.safetensors: SHA-256 .* does not match manifest\.json/,
    );
    refused(
      await run("train.ts", [
        ...flags,
        "--output-dir",
        `${dir}/run2`,
        "--max-steps",
        "1",
        "--init-checkpoint",
        ck,
      ]),
      /model\.safetensors: SHA-256 .* does not match manifest\.json/,
    );
  }));
