/**
 * `deno task bench:bert` keeps what it measured when a later part fails (issue 13): with a fault injected
 * into the last part (BERTFUSE_BENCH_FAULT, bench/bert.ts), the figures measured before it are printed as
 * they come and are in the --json file, the failure is one line naming the part and the cause, and the
 * exit code is 1. Each case has its median, min and max, the load before it and our plans' profile split
 * (issue 30); peers that cannot run are one line each and null in the JSON. Runs on the CPU backend (ignored
 * without a C compiler) at a tiny size.
 */
import assert from "node:assert/strict";
import { cliEnv, ROOT, withTemp } from "../util/cli.ts";
import { testCpu } from "../util/cpu_check.ts";
import { stepShares } from "../../bench/step_timing.ts";
import type { Plan } from "../../plan/plan.ts";
import type { Profile } from "../../runtime/profile.ts";

const cpu = await testCpu();

Deno.test({
  name: "bench:bert: a late failure keeps the earlier figures (printed and in the JSON), one line, exit 1",
  ignore: !cpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const json = `${dir}/result.json`;
      // Inference at batch 2 is measured first, then batch 1, which the injected fault fails.
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "--allow-sys=systemMemoryInfo,loadavg",
          "--allow-read",
          "--allow-write",
          "--allow-env",
          "--allow-ffi",
          "--allow-run",
          `${ROOT}bench/bert.ts`,
          ...["--backend", "cpu", "--mode", "infer", "--infer-batch-size", "2", "--seq-len", "16"],
          ...["--rounds", "1", "--steps-per-round", "1", "--python", `${dir}/no-python`, "--json", json],
        ],
        cwd: ROOT,
        env: { ...cliEnv(), BERTFUSE_BENCH_FAULT: "infer-b1" },
      }).output();
      const stdout = new TextDecoder().decode(out.stdout), stderr = new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 1, `exit code ${out.code}\n${stdout}\n${stderr}`);
      for (const impl of ["bertfuse", "bertfuse-unfused"]) {
        assert.match(stdout, new RegExp(`measured bert-tiny-infer-s16-b2-fp32 ${impl}: [\\d.]+ ms`));
      }
      const failures = stderr.split("\n").filter((l) =>
        l.startsWith("bench:bert: bert-tiny-infer-b1 failed")
      );
      assert.ok(failures.length >= 1, stderr);
      assert.match(
        failures[0],
        /^bench:bert: bert-tiny-infer-b1 failed: injected fault \(BERTFUSE_BENCH_FAULT=infer-b1\)$/,
      );
      assert.doesNotMatch(stderr, /^\s+at /m, "no stack trace");
      const result = JSON.parse(await Deno.readTextFile(json));
      assert.deepEqual(
        result.cases.map((c: { name: string; impl: string }) => `${c.name} ${c.impl}`),
        ["bert-tiny-infer-s16-b2-fp32 bertfuse", "bert-tiny-infer-s16-b2-fp32 bertfuse-unfused"],
      );
      for (const c of result.cases) {
        assert.ok(c.ms > 0 && c.seq_per_s > 0 && c.min_ms <= c.ms && c.ms <= c.max_ms, JSON.stringify(c));
        assert.ok(
          c.load.length === 3 && c.gemm_ms > 0 && !c.optimizer_ms && c.first_ms > 0,
          JSON.stringify(c),
        );
      }
      assert.equal(result.blas?.corename !== undefined, (cpu.ctx!.onednn ?? cpu.ctx!.blas) !== undefined);
      assert.deepEqual(result.peers, { torch: null, onnxruntime: null, jax: null });
      assert.match(stderr, /^peer onnxruntime: missing \(cannot run .*no-python/m);
      assert.deepEqual(result.failed, [{
        part: "bert-tiny-infer-b1",
        cause: "injected fault (BERTFUSE_BENCH_FAULT=infer-b1)",
      }]);
    }),
});

Deno.test("bench:bert: --json refuses, before any work, to replace a file that is not a bench result", () =>
  withTemp(async (dir) => {
    const json = `${dir}/notes.json`;
    await Deno.writeTextFile(json, "my notes\n");
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-read", "--allow-write", "--allow-env", `${ROOT}bench/bert.ts`, "--json", json],
      cwd: ROOT,
      env: cliEnv(),
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 1, stderr);
    assert.match(
      stderr,
      /^error: --json .*notes\.json exists and is not a bench result file .*nothing was written\)$/m,
    );
    assert.equal(await Deno.readTextFile(json), "my notes\n");
  }));

Deno.test("bench:bert: a profile splits into GEMMs, the optimizer (ops located in update.ts) and the rest", () => {
  const kernel = (kind: string, ...about: string[]) => ({ kind, about });
  const opt = "(optimizer/update.ts)", model = "(models/bert.ts:9)";
  const plan = {
    kernels: [
      kernel("matmul", `%1 matmul f32[8,8] ${model} -> written`),
      kernel("reduce", `%2 mul f32[8] ${opt}`, `%3 sqrt f32[1] ${model}`),
      kernel("loop", `%4 add f32[8] ${model}`, `binding 0 (read): %2 ${opt}`),
    ],
  } as unknown as Plan;
  const launches = [1, 2, 4].map((ms, kernel) => ({ kernel, ns: ms * 1e6 }));
  const p = { launches, kernelNs: 7e6, stepMs: 7.5 } as unknown as Profile;
  assert.deepEqual(stepShares(plan, p), { gemm_ms: 1, optimizer_ms: 2, other_ms: 4, copy_ms: 0.5 });
});
