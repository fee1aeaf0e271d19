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
import { basename } from "node:path";
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

const STAGES = ["probe", "precompile", "train", "check", "peer", "infer", "bert-base", "compile"];

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
      const sh = (script: string, args: string[], more: Record<string, string> = {}) =>
        new Deno.Command("bash", {
          args: [`${ROOT}bench/${script}`, ...args],
          cwd: ROOT,
          env: { ...env, ...more },
          clearEnv: true,
        })
          .output();
      const pack = await sh("gpu_pack.sh", ["--small", "--cache-only"]);
      const dec = (b: Uint8Array) => new TextDecoder().decode(b);
      assert.equal(pack.code, 0, dec(pack.stdout) + dec(pack.stderr));
      const out = `${dir}/result.json`;
      await Deno.mkdir(`${dir}/OUT`);
      const run = await sh("gpu_run.sh", ["--small", "--out", out], { OUT: `${dir}/OUT` });
      const log = dec(run.stdout) + dec(run.stderr);
      assert.equal(run.code, 0, log);
      const r = JSON.parse(await Deno.readTextFile(out));
      assert.equal(r.device, "Fake GPU");
      assert.match(r.date, /^\d{4}-\d{2}-\d{2}$/);
      assert.equal(r.command, `bench/gpu_run.sh --small --out ${out}`);
      const stages = Object.fromEntries(r.stages.map((s: { stage: string }) => [s.stage, s]));
      assert.deepEqual(Object.keys(stages), STAGES);
      // Every stage printed its one summary line.
      for (const s of STAGES) assert.match(log, new RegExp(`^== ${s}: `, "m"));
      // Kernels do not run on the fake: the checks run, fail and are recorded; the stages after them still run.
      assert.equal(stages.check.ok, false);
      assert.ok(r.check.total > 0 && r.check.passed < r.check.total, JSON.stringify(r.check));
      for (const s of ["probe", "precompile", "train", "infer"]) assert.ok(stages[s].ok, `${s}: ${log}`);
      assert.equal(r.probe.kernel_cache.packed_entries_hit, true, JSON.stringify(r.probe));
      // The train stage's figures, from one executor per side: garbage losses are flagged, never passed.
      assert.equal(r.train.fused.init_loss_ok, false);
      assert.ok(r.train.fused.seq_per_s > 0 && r.train.unfused.seq_per_s > 0, JSON.stringify(r.train));
      assert.ok(typeof r.train.update_diffs.unfused_vs_fused.ok === "boolean");
      assert.ok(r.profile.kernels_timed > 0 && r.profile.kernel_ms > 0, JSON.stringify(r.profile));
      const impls = new Set(r.cases.map((c: { name: string; impl: string }) => `${c.name} ${c.impl}`));
      for (const c of ["train-s16-fp16", "infer-s16-b2-fp16", "infer-s16-b1-fp16"]) {
        for (const impl of ["bertfuse", "bertfuse-unfused"]) {
          assert.ok(impls.has(`bert-tiny-${c} ${impl}`), [...impls].join(", "));
        }
      }
      // BERT-base needs torch: without it the stage fails and is recorded; with it, garbage from kernels that
      // never ran must not pass the comparison with transformers.
      assert.ok(!stages["bert-base"].ok && r.bert_base?.ok !== true, JSON.stringify(r.bert_base));
      if (stages.peer.ok) assert.ok(r.cases.some((c: { impl: string }) => c.impl === "torch-eager"));
      // $OUT holds the results, the table and the logs.
      const back = [...Deno.readDirSync(`${dir}/OUT`)].map((e) => e.name).sort();
      assert.deepEqual(back, ["gpu-run-logs.tgz", "result-summary.txt", basename(out)].sort());
      // The packed cache held every kernel the run compiled.
      assert.ok(r.kernel_cache_entries_at_start > 0);
      assert.equal(r.kernel_cache_entries_now, r.kernel_cache_entries_at_start, log);

      // Killed mid-run, as the device tool kills a command at its limit: every stage that had ended is in $OUT.
      await Deno.remove(`${dir}/OUT`, { recursive: true });
      await Deno.mkdir(`${dir}/OUT`);
      const child = new Deno.Command("setsid", {
        args: ["bash", `${ROOT}bench/gpu_run.sh`, "--small", "--out", out],
        cwd: ROOT,
        env: { ...env, OUT: `${dir}/OUT` },
        clearEnv: true,
        stdout: "piped",
        stderr: "null",
      }).spawn();
      let seen = "";
      for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
        seen += chunk;
        if (/^== check \(/m.test(seen)) break; // the check stage has begun: probe..train have ended
      }
      const pkill = new Deno.Command("pkill", { args: ["-KILL", "-s", `${child.pid}`] }); // the session:
      while ((await pkill.output()).success); // `timeout` gives each stage a process group of its own
      await child.status;
      const kept = JSON.parse(await Deno.readTextFile(`${dir}/OUT/${basename(out)}`));
      assert.deepEqual(kept.stages.map((s: { stage: string }) => s.stage), ["probe", "precompile", "train"]);
      assert.ok(kept.train.fused.seq_per_s > 0, JSON.stringify(kept.train));
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
