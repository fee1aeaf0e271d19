/**
 * `deno task train` as a whole, on the built-in Brown corpus with BERT-tiny on WebGPU (lavapipe in CI):
 * the loss falls within a CI-sized run; resume is exact (N steps, then resume to N+M, gives the same bytes
 * as N+M in one go); SIGTERM mid-run finishes the step and leaves a complete checkpoint; a run refuses to
 * overwrite checkpoints it was not told to resume, and a corrupt checkpoint stops it with a clear error.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { readMetrics } from "../../training/metrics.ts";
import { TRAIN_DEFAULTS, type TrainOptions } from "../../training/options.ts";
import { runTraining } from "../../training/run.ts";
import { findNewestCheckpoint, verifyCheckpoint } from "../../training/checkpoint.ts";
import { cliEnv, ROOT, runCli, withTemp } from "../util/cli.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu(), MODEL = join(ROOT, "models/bert-tiny.ts");

const options = (outputDir: string, over: Partial<TrainOptions> = {}): TrainOptions => ({
  ...TRAIN_DEFAULTS,
  model: MODEL,
  outputDir,
  precision: "fp32",
  backend: "webgpu",
  fuse: true,
  resumeFromCheckpoint: false,
  phase2: false,
  heldOutInstances: 0, // the CPU tier's runs score them; 1,024 took minutes a run on lavapipe
  ...over,
});

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

Deno.test({
  name: "train: BERT-tiny's masked-LM loss falls on the Brown corpus within 40 steps (WebGPU)",
  ignore: !gpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      // Batch 4, not the default 8: a step costs 0.64 of one on lavapipe and the loss still falls by 0.45.
      const run = { maxSteps: 40, trainBatchSize: 4, logFreq: 1, numStepsPerCheckpoint: 1000 };
      const r = await runTraining(options(dir, { ...run, warmupProportion: 0.05 }));
      assert.equal(r.records.length, 40);
      const mlm = r.records.map((x) => x.mlm_loss);
      const first = mean(mlm.slice(0, 8)), last = mean(mlm.slice(-8));
      assert.ok(last < first - 0.3, `MLM loss ${first.toFixed(3)} -> ${last.toFixed(3)}`);
      assert.ok(mlm.every(Number.isFinite));
      // metrics.jsonl is the UI's; the run itself wrote a checkpoint at the end.
      assert.ok(r.lastCheckpoint?.endsWith("ckpt_40"));
      await verifyCheckpoint(r.lastCheckpoint!);
    }),
});

Deno.test({
  name: "train: 2 steps + resume to 4 gives the same model and optimizer bytes as 4 steps in one go",
  ignore: !gpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const common = { maxSteps: 4, trainBatchSize: 2, logFreq: 1, numStepsPerCheckpoint: 1000 };
      const straight = await runTraining(options(join(dir, "a"), common));
      const first = await runTraining(options(join(dir, "b"), { ...common, stepsThisRun: 2 }));
      assert.equal(first.step, 2);
      assert.equal(first.stoppedBy, "steps-this-run");
      const resumed = await runTraining(options(join(dir, "b"), { ...common, resumeFromCheckpoint: true }));
      assert.equal(resumed.step, 4);
      for (const f of ["model.safetensors", "optimizer.safetensors"]) {
        const a = await Deno.readFile(join(straight.lastCheckpoint!, f));
        const b = await Deno.readFile(join(resumed.lastCheckpoint!, f));
        assert.ok(a.length === b.length && a.every((x, i) => x === b[i]), `${f} differs after resume`);
      }
      // The runs' losses agree step for step too.
      assert.deepEqual(resumed.records.map((x) => x.loss), straight.records.slice(2).map((x) => x.loss));
    }),
});

Deno.test({
  name: "train: SIGTERM finishes the step, writes a complete checkpoint and exits 0",
  ignore: !gpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const child = new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", join(ROOT, "cli/train.ts"), "--output-dir", dir, "--backend", "webgpu"].concat(
          // No held-out figures: their graph would be compiled, and nothing here reads them.
          "--train-batch-size 2 --max-steps 500 --log-freq 1 --heldout-instances 0".split(" "),
        ),
        cwd: ROOT,
        env: cliEnv(),
        stderr: "piped",
        stdout: "null",
      }).spawn();
      const dec = new TextDecoder();
      let seen = "";
      const reader = child.stderr.getReader();
      const rest = (async () => {
        while (true) {
          const { value, done } = await reader.read();
          if (done) return;
          seen += dec.decode(value);
        }
      })();
      // Signal once three steps are logged (metrics.jsonl gets a line per logged step).
      const logged = async () =>
        (await Deno.readTextFile(join(dir, "metrics.jsonl")).catch(() => "")).split("\n").length - 1;
      const deadline = Date.now() + 300_000;
      while (await logged() < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
      child.kill("SIGTERM");
      const status = await child.status;
      await rest;
      assert.equal(status.code, 0, seen);
      const newest = await findNewestCheckpoint(dir);
      assert.ok(newest, `no checkpoint after SIGTERM:\n${seen}`);
      const manifest = await verifyCheckpoint(newest!);
      assert.ok(manifest.step >= 3 && manifest.step < 500, `checkpoint at step ${manifest.step}`);
      const metrics = await readMetrics(join(dir, "metrics.jsonl"));
      assert.ok(metrics.length >= 3);
      for (const f of ["loss_curve.svg", "loss_curve.png"]) {
        assert.ok((await Deno.stat(join(dir, f))).size > 100);
      }
    }),
});

Deno.test({
  name: "train: refuses to overwrite an earlier run, and a corrupt checkpoint stops a resume",
  ignore: !gpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      await runTraining(options(dir, { maxSteps: 1, trainBatchSize: 2 }));
      const ckpt = join(dir, "ckpt_1");
      const args = ["--output-dir", dir, ..."--backend webgpu --train-batch-size 2 --max-steps 2".split(" ")];
      const perms = ["-A"];
      const again = await runCli("train.ts", args, perms);
      assert.equal(again.code, 1);
      assert.match(again.stderr, /already has checkpoints.*--resume-from-checkpoint/);
      // Flip one byte of the weights: the resume names the file and changes nothing.
      const path = join(ckpt, "model.safetensors");
      const bytes = await Deno.readFile(path);
      bytes[bytes.length - 1] ^= 0xff;
      await Deno.writeFile(path, bytes);
      const listing = () => [...Deno.readDirSync(dir)].map((e) => e.name).sort();
      const before = listing();
      const resumed = await runCli("train.ts", [...args, "--resume-from-checkpoint"], perms);
      assert.equal(resumed.code, 1);
      assert.match(resumed.stderr, /model\.safetensors/);
      assert.deepEqual(listing(), before);
    }),
});

Deno.test("train: --help lists NVIDIA's options; bad flags are one-line errors", async () => {
  const help = await runCli("train.ts", ["--help"], ["-A"]);
  assert.equal(help.code, 0);
  const flags =
    "input-dir train-batch-size gradient-accumulation-steps loss-scale steps-this-run phase1-end-step";
  for (const flag of `${flags} resume-from-checkpoint init-checkpoint`.split(" ")) {
    assert.ok(help.stdout.includes(`--${flag}`), flag);
  }
  const bad = await runCli("train.ts", "--train-batch-size 6 --gradient-accumulation-steps 4".split(" "), [
    "-A",
  ]);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /^error: .*multiple of --gradient-accumulation-steps/m);
  const unknown = await runCli("train.ts", ["--frobnicate"], ["-A"]);
  assert.equal(unknown.code, 1);
});

Deno.test({
  name: "train: phase 2 continues from phase 1's checkpoint; --init-checkpoint; infer reads a checkpoint",
  ignore: !gpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const small = { trainBatchSize: 2, logFreq: 1, numStepsPerCheckpoint: 1000 };
      await runTraining(options(dir, { ...small, maxSteps: 2 }));
      const p2 = await runTraining(
        options(dir, { ...small, maxSteps: 3, phase2: true, phase1EndStep: 2, resumeFromCheckpoint: true }),
      );
      // Checkpoints are numbered on from phase 1's end; the schedule restarted (3 updates in phase 2).
      assert.equal(p2.step, 5);
      assert.ok(p2.lastCheckpoint!.endsWith("ckpt_5"));
      const state = JSON.parse(await Deno.readTextFile(join(p2.lastCheckpoint!, "trainer_state.json")));
      assert.equal(state.phase, 2);
      assert.equal(state.optimizerStep, 3);
      assert.deepEqual(p2.records.map((r) => r.optimizer_steps), [1, 2, 3]);
      // A fresh run from those weights.
      const fresh = await runTraining(
        options(join(dir, "fresh"), { ...small, maxSteps: 1, initCheckpoint: p2.lastCheckpoint }),
      );
      assert.equal(fresh.step, 1);
      // deno task infer reads the checkpoint as a Hugging Face folder.
      const infer = await runCli("infer.ts", [
        "--checkpoint",
        p2.lastCheckpoint!,
        "--output",
        join(dir, "out.safetensors"),
      ], ["-A"]);
      assert.equal(infer.code, 0, infer.stderr);
    }),
});
