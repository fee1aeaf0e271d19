/**
 * End to end: `deno task finetune` fine-tunes a fresh BERT-tiny on the built-in sentiment sentences and
 * beats the majority class on a dev slice, as the bag-of-words Naive Bayes baseline beside it does. CPU
 * backend (emitted C): 150 steps of 16 take under a minute on this 2-core VM (24 s at load 4), lavapipe
 * 4-10 sequences/s (several minutes). Without a C compiler it is reported as ignored with the reason.
 *
 * Why these settings: a fresh BERT-tiny's [CLS] row is its own embedding plus a few percent of
 * input-dependent signal, and at learning rates of 5e-4 and above (tried up to 1e-2, with and without
 * dropout, batch 16 and 32) Adam grows the head's offset faster than the encoder learns to route words into
 * [CLS]: every such run ended predicting one class. Lower is what works: the default run (1e-4, batch 32)
 * sits at a loss of ln 2 for about 120 steps, then falls to 0.3 and ends at 77.9% dev accuracy
 * (docs/finetune.md, "Measured"); 1e-4 with batch 16 has not started to fall by step 150.
 * At 2e-4, 150 steps of 16 (warmup 10%), sequence 32, the fall comes around step 100; seeds 1, 2 and 3 by
 * hand gave 69.0%, 69.7% and 72.3% on the first 300 dev sentences (majority class 58.0%).
 *
 * It runs from an empty folder so that a developer's own `deno task train` checkpoint under out/runs/ does
 * not change the start.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { cliEnv, ROOT, withTemp } from "../util/cli.ts";
import { testCpu } from "../util/cpu_check.ts";

const cpu = await testCpu();

const ARGS = [
  ...["--backend", "cpu", "--task", "sentiment", "--do-train", "--do-eval", "--seed", "1"],
  ...["--max-seq-length", "32", "--train-batch-size", "16", "--max-steps", "150", "--learning-rate", "2e-4"],
  ...["--warmup-proportion", "0.1", "--eval-limit", "300", "--log-freq", "50"],
];

const PERMS = "--allow-read --allow-write --allow-env --allow-ffi --allow-run".split(" ");
const CMD = ["run", "--config", join(ROOT, "deno.json"), ...PERMS, join(ROOT, "cli/finetune.ts"), ...ARGS];

/** Dev accuracy must beat the majority class by this much (accuracy points). */
const MARGIN = 0.05;

Deno.test({
  name: "finetune: a fresh BERT-tiny beats the majority class on the sentiment dev set",
  ignore: !cpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const run = join(dir, "run"), cmd = { args: [...CMD, "--output-dir", run], cwd: dir, env: cliEnv() };
      const out = await new Deno.Command(Deno.execPath(), cmd).output();
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
      const r = JSON.parse(await Deno.readTextFile(join(run, "eval_results.json")));
      const after = r.after.dev.accuracy, majority = r.majority_baseline.dev, nb = r.naive_bayes_baseline.dev;
      assert.ok(after > majority + MARGIN, `dev accuracy ${after}, majority class ${majority}`);
      assert.ok(nb > majority + MARGIN && nb <= 1, `bag-of-words Naive Bayes ${nb}, majority ${majority}`);
    }),
});
