/**
 * A fuzz failure on the CPU backend is replayable: the one-line command the fuzzer prints for a CPU seed
 * (cases/fuzz/check.ts replayCommand) is accepted by `deno task fuzz` (tools/fuzz.ts) and reruns that one
 * graph on the same variant (template GEMMs here), which passes. Ignored without a C compiler.
 */
import assert from "node:assert/strict";
import { replayCommand } from "../../cases/fuzz/check.ts";
import { cliEnv, ROOT } from "../util/cli.ts";
import { testCpu } from "../util/cpu_check.ts";
import { cpuDevice } from "../util/fuzz_devices.ts";

const cpu = await testCpu();

Deno.test({
  name: "fuzz: a CPU seed's replay command runs that graph through deno task fuzz",
  ignore: !cpu.ctx,
  fn: async () => {
    const line = replayCommand(1_000_003, cpuDevice(cpu.ctx!, false), true);
    assert.equal(line, "deno task fuzz --seed 1000003 --count 1 --backend cpu --fused --template-gemms");
    // `deno task fuzz` is `deno run <its permissions> tools/fuzz.ts`; the flags are the command's own.
    const flags = line.replace(/^deno task fuzz /, "").split(" ");
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-read",
        "--allow-write",
        "--allow-env",
        "--allow-ffi",
        "--allow-run",
        "tools/fuzz.ts",
        ...flags,
      ],
      cwd: ROOT,
      env: cliEnv(),
    }).output();
    const stdout = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, stdout + new TextDecoder().decode(out.stderr));
    assert.match(stdout, /^fuzz: seeds 1000003\.\.1000003 on cpu$/m);
    assert.match(stdout, /^seeds 1000003\.\.1000003 cpu fused: \d+ kernels/m);
    assert.match(stdout, /^1 of 1 graphs passed in [\d.]+ s; [1-9]\d* elements checked/m);
  },
});
