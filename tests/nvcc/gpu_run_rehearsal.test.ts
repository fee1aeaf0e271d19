/**
 * The GPU run rehearsed without a GPU: bench/gpu_pack.sh --small --cache-only fills a kernel cache, then
 * bench/gpu_run.sh --small runs every stage with the fake driver and fake NVRTC of
 * tests/nvcc/cuda_runtime_fake.test.ts on LD_LIBRARY_PATH (kernels do not execute there, so the numeric
 * checks fail, as they must, and are recorded), as on a bare machine: an empty DENO_DIR and no network.
 * What it proves: every stage starts, runs to its end and is recorded; a failing stage does not stop the
 * next; the results file has the device, date, command, cases and the cost model's predicted and measured
 * step; the report gets a measured column; and the packed cache held every kernel the run compiled.
 *
 * Needs gcc and cuda.h (as the fake-driver test) and python3; about a minute.
 */
import assert from "node:assert/strict";
import { ROOT } from "../util/cli.ts";
import { buildFakeLibs, cudaInclude, FAKE_DRIVER, FAKE_NVRTC } from "../util/fake_cuda.ts";

/**
 * The fake libcuda and libnvrtc, with one change: the fake's launch log is a fixed array of 4096 records
 * that a benchmark's thousands of launches would overrun, so here it wraps around (nothing here reads it).
 */
function buildFakes(dir: string): Promise<string | undefined> {
  return buildFakeLibs(dir, {
    "libcuda.so.1": FAKE_DRIVER.replaceAll("launches[nlaunch++]", "launches[nlaunch++ % 4096]"),
    "libnvrtc.so.13": FAKE_NVRTC,
  });
}

const hasPython = await new Deno.Command("python3", { args: ["-c", "import json"] }).output()
  .then((r) => r.success, () => false);

Deno.test({
  name: "gpu_run.sh --small, rehearsed with the fake driver offline: every stage recorded, cache complete",
  ignore: !cudaInclude() || !hasPython,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-gpu-run-" });
    try {
      const why = await buildFakes(dir);
      if (why) return console.log(`rehearsal skipped: ${why}`);
      const env = {
        PATH: Deno.env.get("PATH") ?? "",
        HOME: Deno.env.get("HOME") ?? dir,
        NO_COLOR: "1",
        LD_LIBRARY_PATH: dir,
        // No cuBLASLt here (the fake has none): GEMMs run as template kernels.
        BERTFUSE_CUDA_GEMM: "template",
        BERTFUSE_OFFLINE: `${dir}/offline`,
        GPU_RUN_WORK: `${dir}/work`,
        GPU_RUN_DEVICE: "Fake GPU",
        // A bare machine: nothing cached by Deno, and any network access fails.
        DENO_DIR: `${dir}/deno-dir`,
        HTTP_PROXY: "http://127.0.0.1:9",
        HTTPS_PROXY: "http://127.0.0.1:9",
        NPM_CONFIG_REGISTRY: "http://127.0.0.1:9/",
      };
      const sh = (script: string, args: string[]) =>
        new Deno.Command("bash", {
          args: [`${ROOT}bench/${script}`, ...args],
          cwd: ROOT,
          env,
          clearEnv: true,
        })
          .output();
      const pack = await sh("gpu_pack.sh", ["--small", "--cache-only"]);
      const dec = (b: Uint8Array) => new TextDecoder().decode(b);
      assert.equal(pack.code, 0, dec(pack.stdout) + dec(pack.stderr));
      const out = `${dir}/result.json`;
      const run = await sh("gpu_run.sh", ["--small", "--out", out]);
      const log = dec(run.stdout) + dec(run.stderr);
      assert.equal(run.code, 0, log);
      const r = JSON.parse(await Deno.readTextFile(out));
      assert.equal(r.device, "Fake GPU");
      assert.match(r.date, /^\d{4}-\d{2}-\d{2}$/);
      assert.equal(r.command, `bench/gpu_run.sh --small --out ${out}`);
      const stages = Object.fromEntries(r.stages.map((s: { stage: string }) => [s.stage, s]));
      const names = [
        "check",
        "bert-base-make",
        "bert-base-infer",
        "bert-base-compare",
        "bench",
        "profile",
        "cost-model",
        "peers",
      ];
      assert.deepEqual(Object.keys(stages), names);
      // Kernels do not run on the fake: the battery runs and fails, and the stages after it still run.
      assert.equal(stages.check.ok, false);
      assert.ok(r.check.total > 0 && r.check.passed < r.check.total, JSON.stringify(r.check));
      for (const s of ["bert-base-infer", "bench", "profile", "cost-model"]) {
        assert.ok(stages[s].ok, `${s}: ${log}`);
      }
      const impls = new Set(r.cases.map((c: { name: string; impl: string }) => `${c.name} ${c.impl}`));
      for (const c of ["train-s16-fp16", "infer-s16-b2-fp16", "infer-s16-b1-fp16"]) {
        for (const impl of ["bertfuse", "bertfuse-unfused"]) {
          assert.ok(impls.has(`bert-tiny-${c} ${impl}`), [...impls].join(", "));
        }
      }
      if (stages["bert-base-make"].ok) {
        // Garbage from kernels that never ran must not pass the comparison with transformers.
        assert.equal(r.bert_base.ok, false);
        assert.deepEqual(Object.keys(r.bert_base.rel_err).sort(), [
          "prediction_logits",
          "seq_relationship_logits",
        ]);
      }
      if (stages.peers.ok) assert.ok(r.cases.some((c: { impl: string }) => c.impl === "torch-eager"));
      assert.ok(
        r.cost_model.predicted_step_ms > 0 && r.cost_model.measured_kernel_ms > 0,
        JSON.stringify(r.cost_model),
      );
      assert.ok(r.cost_model.gemm_flops >= r.cost_model.gemm_flops_library);
      const report = await Deno.readTextFile(r.cost_model.report);
      const rows = report.slice(report.indexOf("## Kernels")).split("\n").filter((l) => /^\| k\d+/.test(l));
      assert.ok(
        rows.length > 0 && rows.every((l) => /\| [0-9.]+ \|$/.test(l)),
        "every kernel has a measured time",
      );
      // The packed cache held every kernel the run compiled.
      assert.ok(r.kernel_cache_entries_at_start > 0);
      assert.equal(r.kernel_cache_entries_at_end, r.kernel_cache_entries_at_start, log);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
