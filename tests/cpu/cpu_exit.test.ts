/**
 * A process that ran CPU kernels exits cleanly: the thread pool's idle helpers spin for a while after
 * each kernel (runtime/cpu/pool.c), and unloading the libraries they run in under a spinning thread at
 * exit crashed the process with SIGSEGV (status 139; seen with libgomp's threads before the pool) until
 * they were linked `-z nodelete` (runtime/cpu/cc.ts).
 */
import assert from "node:assert/strict";
import { testCpu } from "../util/cpu_check.ts";

const cpu = await testCpu();

Deno.test({
  name: "a process that ran CPU kernels in parallel exits with status 0",
  ignore: !cpu.ctx,
  fn: async () => {
    const url = (p: string) => new URL(p, import.meta.url).href;
    const code = `
      import { ModelBuilder } from "${url("../../dsl/mod.ts")}";
      import { CPU } from "${url("../../engine/backends.ts")}";
      import { openRow } from "${url("../../engine/choose_backend.ts")}";
      const m = new ModelBuilder("exit");
      const x = m.input("x", "f32", [512, 256]);
      m.output("s", x.mul(2).exp().sum([0], false));
      const { executor } = await CPU.compile(await openRow(CPU), m.graph, true);
      const out = await executor.run({ x: new Float32Array(512 * 256).fill(0.5) });
      console.log(out.s.length);`;
    const r = await new Deno.Command(Deno.execPath(), {
      args: ["eval", code],
      stdout: "piped",
      stderr: "piped",
    })
      .output();
    const err = new TextDecoder().decode(r.stderr);
    assert.equal(new TextDecoder().decode(r.stdout).trim(), "256", err);
    assert.equal(r.code, 0, `exit status ${r.code} ${r.signal ?? ""}: ${err}`);
  },
});
