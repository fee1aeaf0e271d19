/**
 * The CPU backend (emitted C on its thread pool, BLAS GEMMs) against the reference interpreter: every fusion case
 * (cases/fusion_cases.ts) in f32 and with f16 storage, fused and unfused, on fresh random inputs; with
 * OpenBLAS where it is installed (GEMMs as sgemm + a C epilogue) and once more with every GEMM as the C
 * template kernel. Needs a C compiler (present on every machine of ours); without one the tests are
 * reported as ignored with the reason.
 */
import assert from "node:assert/strict";
import { FUSION_CASES, graphOf } from "../../cases/fusion_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { F16_TOL, F32_TOL } from "../util/fused_check.ts";
import { checkCpuAgainstReference, testCpu } from "../util/cpu_check.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { TARGETS } from "../../compiler/targets/target.ts";
import { CpuExecutor } from "../../runtime/cpu/cpu_executor.ts";

const cpu = await testCpu();

for (const c of FUSION_CASES) {
  for (const dtype of c.dtypes) {
    Deno.test({
      name: `cpu fused vs reference (${dtype}): ${c.name}`,
      ignore: !cpu.ctx,
      fn: async () => {
        const g = graphOf(c.name, c.body, dtype, c.backward);
        const feeds = randomFeeds(g, 3000 + FUSION_CASES.indexOf(c), c.ints);
        const tol = c.tol?.[dtype] ?? (dtype === "f16" ? F16_TOL : F32_TOL);
        const fused = await checkCpuAgainstReference(cpu.ctx!, g, feeds, { fuse: true, tol });
        const unfused = await checkCpuAgainstReference(cpu.ctx!, g, feeds, { fuse: false, tol });
        assert.ok(fused.kernels < unfused.kernels, `fused ${fused.kernels} vs unfused ${unfused.kernels}`);
        if (fused.libraryGemms > 0) {
          // The same graph with every GEMM as the C template kernel.
          await checkCpuAgainstReference(cpu.ctx!, g, feeds, { fuse: true, tol, blas: false });
        }
      },
    });
  }
}

Deno.test("--backend cpu without a C compiler is a one-line error naming the compiler", async () => {
  const code = `import { openBackend } from "${
    new URL("../../engine/choose_backend.ts", import.meta.url).href
  }";
    try { await openBackend("cpu"); console.log("opened"); } catch (e) { console.log(e.name + ": " + e.message); }`;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", code],
    env: { CC: "/nonexistent/cc", NO_COLOR: "1" },
  }).output();
  const lines = new TextDecoder().decode(out.stdout).trim().split("\n");
  assert.deepEqual(lines, [
    "CpuBackendError: --backend cpu: no C compiler: '/nonexistent/cc' not found (install gcc, e.g. " +
    "apt-get install gcc, or set CC)",
  ]);
});

Deno.test({
  name: "a plan for another target, launching a missing kernel or copying into a smaller buffer: one line",
  ignore: !cpu.ctx,
  fn: async () => {
    const c = FUSION_CASES[0], g = graphOf(c.name, c.body, "f32", false);
    const compiled = (t: keyof typeof TARGETS) => compileGraph(g, { fuse: true, target: TARGETS[t] }).plan;
    const plan = compiled("cpu"), sizes = [...plan.buffers].sort((a, b) => b.bytes - a.bytes);
    const refuses = (p: typeof plan, re: RegExp) => assert.rejects(() => CpuExecutor.create(cpu.ctx!, p), re);
    await refuses(compiled("cuda-sm90"), /^CpuError: the plan was compiled for cuda-sm90 \(cuda\); the CPU/);
    const steps = [...plan.steps, { op: "launch" as const, kernel: 99 }];
    await refuses({ ...plan, steps }, /^CpuError: plan .*: step \d+ launches kernel 99, which it lacks/);
    const updates = [{ param: sizes.at(-1)!.id, value: sizes[0].id }];
    await refuses({ ...plan, updates }, /^CpuError: update 0: .* bytes do not fit in/);
  },
});
