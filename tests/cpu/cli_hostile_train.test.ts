/**
 * `deno task train` run as a hostile user would (issue 13), on the reference backend with a micro BERT
 * (hidden 16, one layer) and a few hundred instances, so each run takes seconds: a folder of user files as
 * the output, two trainers on one folder, signals, fp16 overflow at a checkpoint step, shards made for a
 * larger vocabulary, a damaged checkpoint given to infer and --init-checkpoint. On the CPU backend: signals
 * to the process group of `deno task train` and `deno task finetune`, as a terminal sends Ctrl-C (issue 28).
 */
import assert from "node:assert/strict";
import { mayMount, ROOT, sh, withTemp } from "../util/cli.ts";
import { readCheckpoint } from "../../training/checkpoint.ts";
import { testCpu } from "../util/cpu_check.ts";

// The rest of the config is Hugging Face's BertConfig defaults (models/bert_config.ts).
const MICRO = { hidden_size: 16, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 32 };
/** A run that goes on until stopped, logging each step. */
const LONG = "--max-steps 100000 --log-freq 1".split(" ");
// As `deno task train` runs it (deno.json).
const PERMS = "read write env run ffi sys=systemMemoryInfo".split(" ").map((p) => `--allow-${p}`);

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

const OPTS = { cwd: ROOT, env: { NO_COLOR: "1" }, stdout: "piped", stderr: "piped" } as const;
const command = (script: string, args: string[]) =>
  new Deno.Command(Deno.execPath(), { ...OPTS, args: ["run", ...PERMS, `${ROOT}cli/${script}`, ...args] });
/** `deno task <name> ...` leading its own process group (setsid), as a shell starts a foreground job. */
const task = (name: string, args: string[]) =>
  new Deno.Command("setsid", { ...OPTS, args: [Deno.execPath(), "task", name, ...args] }).spawn();

/** Waits (60 s at most) until the run in `dir` is stepping: metrics.jsonl has more than `lines` lines. */
async function stepping(dir: string, lines = 0): Promise<void> {
  for (const until = Date.now() + 60_000; await records(dir) <= lines && Date.now() < until;) {
    await new Promise((r) => setTimeout(r, 100));
  }
}
const records = async (dir: string) =>
  (await Deno.readTextFile(`${dir}/metrics.jsonl`).catch(() => "")).split("\n").length - 1;

/** Awaits a run stopped by a signal: exit 0, "stopped at step N" and ckpt_N in `dir`; returns stderr. */
async function stopped(child: Deno.ChildProcess, dir: string): Promise<string> {
  const kill = setTimeout(() => Deno.kill(-child.pid, "SIGKILL"), 60_000); // one ignoring it fails, not hangs
  const out = await child.output(), stderr = new TextDecoder().decode(out.stderr);
  clearTimeout(kill);
  assert.equal(out.code, 0, stderr);
  await Deno.stat(`${dir}/ckpt_${stderr.match(/stopped at step (\d+)/)?.[1]}/manifest.json`);
  return stderr;
}

async function run(script: string, args: string[]) {
  const out = await command(script, args).output(), dec = new TextDecoder();
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
  const config = { ...MICRO, max_position_embeddings: 64, vocab_size: vocab };
  await Deno.writeTextFile(`${dir}/micro.json`, JSON.stringify(config));
  await Deno.writeTextFile(`${dir}/text.txt`, text(20));
  const shape = "--max-seq-length 16 --max-predictions-per-seq 3 --quiet".split(" ");
  const prepare = ["--input", `${dir}/text.txt`, "--output", `${dir}/shards`, ...shape];
  const p = await run("prepare_data.ts", prepare);
  assert.equal(p.code, 0, p.stderr);
  const rest = "--backend reference --train-batch-size 2".split(" ");
  return ["--model", `${dir}/micro.json`, "--input-dir", `${dir}/shards`, ...rest];
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
    const fp16 = "--precision fp16 --init-loss-scale 1e38 --max-steps 3".split(" ");
    const flags = [...await setup(dir), ...fp16];
    const a = await run("train.ts", [...flags, "--output-dir", `${dir}/a`]);
    assert.equal(a.code, 0, a.stderr);
    const b1 = await run("train.ts", [...flags, "--output-dir", `${dir}/b`, "--steps-this-run", "1"]);
    assert.equal(b1.code, 0, b1.stderr);
    const state = JSON.parse(await Deno.readTextFile(`${dir}/b/ckpt_1/trainer_state.json`));
    assert.equal(state.train_state.gradNorm, "NaN");
    assert.equal(state.train_state.skippedSteps, 1);
    assert.ok(!JSON.stringify(state.args).includes(dir) && state.args.outputDir === ".", "no local paths");
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
    const flags = [...await setup(dir), "--output-dir", `${dir}/run`, ...LONG];
    const first = command("train.ts", flags).spawn();
    try {
      const lock = `${dir}/run/.bertfuse.lock`;
      await stepping(`${dir}/run`); // stepping, not just holding the lock
      const held = JSON.parse(await Deno.readTextFile(lock));
      const second = await run("train.ts", [...flags, "--resume-from-checkpoint"]);
      refused(second, new RegExp(`is in use by another run: pid ${held.pid} on .*, started `));
      const t0 = Date.now();
      first.kill("SIGTERM");
      const stderr = await stopped(first, `${dir}/run`);
      assert.ok(Date.now() - t0 < 15_000, `stopped after ${Date.now() - t0} ms`);
      assert.match(stderr, /stopped at step \d+ on reference/);
      await Deno.stat(lock).then(() => assert.fail("the lock was left behind"), () => {});
    } finally {
      try {
        first.kill("SIGKILL");
      } catch { /* already gone */ }
    }
  }));

Deno.test("a second Ctrl-C a second later quits at once within a step; the stale lock is taken over", () =>
  withTemp(async (dir) => {
    const flags = [...await setup(dir), "--output-dir", `${dir}/run`, ...LONG];
    // 128 sequences a step: ~10 s on the reference backend, so both Ctrl-C come within the second step,
    // the second a second after the first (not the same one delivered twice: training/signals.ts).
    const child = command("train.ts", [...flags, "--train-batch-size", "128"]).spawn();
    await stepping(`${dir}/run`);
    for (const ms of [300, 1000]) {
      await new Promise((r) => setTimeout(r, ms)).then(() => child.kill("SIGINT"));
    }
    const t0 = Date.now();
    const out = await child.output();
    assert.ok(Date.now() - t0 < 5_000);
    assert.equal(out.code, 130, "128 + SIGINT, as a shell expects");
    assert.match(new TextDecoder().decode(out.stderr), /SIGINT again: quitting now without saving/);
    // All but the lock goes, as when a run is killed before it writes anything (its folder is only a lock,
    // not a user's file); the next run sees nobody holds the lock and takes it over.
    for await (const e of Deno.readDir(`${dir}/run`)) {
      if (e.name !== ".bertfuse.lock") await Deno.remove(`${dir}/run/${e.name}`, { recursive: true });
    }
    const next = await run("train.ts", [...flags.slice(0, -4), "--max-steps", "1"]);
    assert.equal(next.code, 0, next.stderr);
    assert.match(next.stderr, /taking over the lock of pid \d+ .*no longer running/);
  }));

Deno.test({
  name: "a checkpoint on a full disk: one line naming it and the cause; the previous one intact",
  ignore: !(await mayMount()),
  fn: () =>
    withTemp(async (dir) => {
      const flags = [...await setup(dir), ..."--max-steps 3 --num-steps-per-checkpoint 1".split(" ")];
      const full = `${dir}/full`, out = `${full}/run`;
      await Deno.mkdir(full);
      // A checkpoint of this model is 6.3 MB (30,522-word embeddings, their moments): one fits, two do not.
      assert.ok(await sh("mount", "-t", "tmpfs", "-o", "size=9m", "tmpfs", full));
      try {
        const r = await run("train.ts", [...flags, "--output-dir", out]);
        refused(r, /full\/run\/ckpt_2: cannot write the checkpoint \(no space left on device\)$/);
        assert.equal(r.stderr.match(/^error: /gm)?.length, 1, r.stderr);
        assert.doesNotMatch(r.stderr, /^\s+at /m, "a stack trace");
        const left = [...Deno.readDirSync(out)].map((e) => e.name).sort().join(" ");
        assert.equal(left, "ckpt_1 metrics.jsonl run.json"); // no ckpt_2.tmp, no lock
        assert.equal((await readCheckpoint(`${out}/ckpt_1`)).step, 1); // its manifest and hashes verify
      } finally {
        await sh("umount", full);
      }
    }),
});

Deno.test("shards for a larger vocabulary than the model's, or a device as shards: refused in a line", () =>
  withTemp(async (dir) => {
    const flags = await setup(dir, 1000);
    refused(
      await run("train.ts", [...flags, "--output-dir", `${dir}/run`, "--max-steps", "1"]),
      /shards were made with a vocabulary of 30522 tokens but .*micro\.json has vocab_size 1000/,
    );
    await Deno.stat(`${dir}/run`).then(() => assert.fail("the refused run left a folder"), () => {});
    const device = [...flags.slice(0, 2), "--input-dir", "/dev/zero", "--output-dir", `${dir}/run`];
    refused(await run("train.ts", device), /\/dev\/zero is not a directory, no manifest\.json/);
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
    const damaged = /model\.safetensors: SHA-256 .* does not match manifest\.json/;
    const infer = ["--checkpoint", ck, "--input", `${dir}/in.jsonl`, "--output", `${dir}/o.safetensors`];
    refused(await run("infer.ts", infer), damaged);
    const again = ["--output-dir", `${dir}/run2`, "--max-steps", "1", "--init-checkpoint", ck];
    refused(await run("train.ts", [...flags, ...again]), damaged);
    // A file where the checkpoint folder goes is named by each command (I28).
    const file = `${ck}/config.json`, notFolder = /--(init-)?checkpoint .*ckpt_1\/config\.json: not a folder/;
    refused(await run("infer.ts", ["--checkpoint", file]), notFolder);
    const r3 = ["--output-dir", `${dir}/r3`, "--init-checkpoint", file];
    refused(await run("train.ts", [...flags, ...r3]), notFolder);
    refused(await run("finetune.ts", r3), notFolder);
  }));

const cpu = await testCpu();
Deno.test({
  name: "one Ctrl-C to deno task train's process group, delivered twice (terminal, deno task), saves",
  ignore: !cpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const flags = (await setup(dir)).map((f) => f === "reference" ? "cpu" : f);
      const child = task("train", [...flags, "--output-dir", `${dir}/run`, ...LONG]);
      await stepping(`${dir}/run`);
      Deno.kill(-child.pid, "SIGINT");
      assert.match(await stopped(child, `${dir}/run`), /SIGINT: stopping after this step/);
    }),
});

Deno.test({
  name: "finetune on the CPU backend: SIGTERM, SIGINT to its group save; a killed run's folder reruns",
  ignore: !cpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const ft = `${dir}/ft`, init = `${ROOT}tests/fixtures/hf-tiny/pretraining`;
      const flags = ["--backend", "cpu", "--output-dir", ft];
      flags.push(..."--train-limit 64 --eval-limit 8".split(" "), ...LONG);
      const expect = { SIGTERM: /taking over the lock of pid \d+/, SIGINT: /resuming from .*ckpt_/ };
      for (const sig of ["SIGKILL", "SIGTERM", "SIGINT"] as const) {
        const lines = await records(ft);
        const start = sig === "SIGINT" ? ["--resume-from-checkpoint"] : ["--init-checkpoint", init];
        const child = task("finetune", [...flags, ...start]);
        await stepping(ft, lines);
        Deno.kill(-child.pid, sig);
        if (sig === "SIGKILL") await child.output(); // no checkpoint yet (every 1,000 steps)
        else assert.match(await stopped(child, ft), expect[sig]);
      }
    }),
});

Deno.test({
  name: "SIGTERM, SIGINT to deno task serve's group while it compiles its plans: it drains and exits 0",
  ignore: !cpu.ctx,
  fn: () =>
    withTemp(async (home) => {
      for (const sig of ["SIGTERM", "SIGINT"] as const) {
        // A fresh cache (the task may write only ~/.cache/bertfuse): the signal lands while cc runs.
        await Deno.remove(`${home}/.cache`, { recursive: true }).catch(() => {});
        const args = [Deno.execPath(), "task", "serve", "--port", "0"];
        const child = new Deno.Command("setsid", { ...OPTS, env: { NO_COLOR: "1", HOME: home }, args })
          .spawn();
        const out = child.stdout.pipeThrough(new TextDecoderStream()).getReader(); // "listening on …"
        const hung = setTimeout(() => Deno.kill(-child.pid, "SIGKILL"), 60_000); // fails, not hangs
        let log = "", signalled = false;
        for (let r = await out.read(); !r.done; r = await out.read()) {
          log += r.value;
          if (!signalled && (signalled = log.includes("listening on"))) Deno.kill(-child.pid, sig);
        }
        const stderr = await new Response(child.stderr).text();
        clearTimeout(hung);
        assert.equal((await child.status).code, 0, log + stderr);
        assert.ok(log.endsWith("stopped\n") && /draining[^]*warming: /.test(stderr), log + stderr); // landed early
      }
    }),
});
