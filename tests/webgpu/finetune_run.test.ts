/**
 * `deno task finetune` as a whole on WebGPU (lavapipe in CI), BERT-tiny on a slice of the built-in
 * sentiment sentences: resume is exact (2 steps, then resume to 4, gives the same model and optimizer
 * bytes as 4 steps in one go), and the run folder holds what it promises.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runFinetune } from "../../training/finetune/loop.ts";
import { FINETUNE_DEFAULTS, type FinetuneOptions } from "../../training/finetune/options.ts";
import { withTemp } from "../util/cli.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

const options = (outputDir: string, over: Partial<FinetuneOptions> = {}): FinetuneOptions => ({
  ...FINETUNE_DEFAULTS,
  // A model folder that does not exist under out/runs would change the start; pin a fresh BERT-tiny.
  configFile: new URL("../../models/bert-tiny.ts", import.meta.url).pathname,
  initCheckpoint: undefined,
  versionTwoWithNegative: false,
  doTrain: true,
  doEval: false,
  doPredict: false,
  maxSeqLength: 32,
  trainBatchSize: 4,
  maxSteps: 4,
  trainLimit: 64,
  evalLimit: 32,
  precision: "fp32",
  backend: "webgpu",
  fuse: true,
  logFreq: 1,
  resumeFromCheckpoint: false,
  outputDir,
  ...over,
});

Deno.test({
  name: "finetune: 2 steps + resume to 4 gives the same model and optimizer bytes as 4 in one go",
  ignore: !gpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      // The default start would be the newest checkpoint under out/runs/; run from an empty folder instead.
      const cwd = Deno.cwd();
      Deno.chdir(dir);
      try {
        const straight = await runFinetune(options(join(dir, "a")));
        const first = await runFinetune(options(join(dir, "b"), { stepsThisRun: 2 }));
        assert.equal(first.step, 2);
        assert.equal(first.stoppedBy, "steps-this-run");
        const resumed = await runFinetune(
          options(join(dir, "b"), { resumeFromCheckpoint: true, doEval: true }),
        );
        assert.equal(resumed.step, 4);
        for (const f of ["model.safetensors", "optimizer.safetensors"]) {
          const a = await Deno.readFile(join(straight.lastCheckpoint!, f));
          const b = await Deno.readFile(join(resumed.lastCheckpoint!, f));
          assert.ok(a.length === b.length && a.every((x, i) => x === b[i]), `${f} differs after resume`);
        }
        assert.deepEqual(resumed.records.map((x) => x.loss), straight.records.slice(2).map((x) => x.loss));
        const results = JSON.parse(await Deno.readTextFile(join(dir, "b", "eval_results.json")));
        assert.ok(results.after.dev.accuracy >= 0 && results.after.dev.accuracy <= 1);
        const cfg = JSON.parse(await Deno.readTextFile(join(resumed.lastCheckpoint!, "config.json")));
        assert.deepEqual(cfg.architectures, ["BertForSequenceClassification"]);
        assert.deepEqual(cfg.id2label, { "0": "negative", "1": "positive" });
      } finally {
        Deno.chdir(cwd);
      }
    }),
});
