/**
 * Compiled CPU kernels are loaded only when intact and safe (issue 28 item 5): each library's SHA-256 is
 * recorded when it is built and checked when it is loaded (a planted or damaged file is rebuilt, never run),
 * and a cache folder others may write is refused with one line.
 */
import assert from "node:assert/strict";
import { ROOT, withTemp } from "../util/cli.ts";
import { testCpu } from "../util/cpu_check.ts";

const cpu = await testCpu();

Deno.test({
  name: "CPU kernel cache: hashes recorded, a planted library rebuilt, a world-writable folder refused",
  ignore: !cpu.ctx,
  fn: () =>
    withTemp(async (dir) => {
      const infer = () =>
        new Deno.Command(Deno.execPath(), {
          args: [
            "run",
            "-A",
            `${ROOT}cli/infer.ts`,
            "--backend",
            "cpu",
            "--text",
            "a fine day",
            "--checkpoint",
            `${ROOT}tests/fixtures/hf-tiny/classification`,
          ],
          env: { BERTFUSE_CACHE: dir, PATH: Deno.env.get("PATH") ?? "", NO_COLOR: "1" },
          clearEnv: true,
        }).output();
      const first = await infer(), dec = (b: Uint8Array) => new TextDecoder().decode(b);
      assert.equal(first.code, 0, dec(first.stderr));
      const libs = [...Deno.readDirSync(`${dir}/cpu`)].map((e) => e.name).filter((n) => n.endsWith(".so"));
      assert.ok(libs.length > 0 && libs.every((l) => Deno.statSync(`${dir}/cpu/${l}.sha256`).isFile));
      for (const l of libs) await Deno.writeFile(`${dir}/cpu/${l}`, new Uint8Array(64).fill(7)); // planted
      const again = await infer();
      assert.equal(again.code, 0, dec(again.stderr));
      assert.equal(dec(again.stdout), dec(first.stdout), "the same answer from rebuilt kernels");
      Deno.chmodSync(`${dir}/cpu`, 0o777);
      const refused = await infer();
      assert.equal(refused.code, 1);
      assert.match(dec(refused.stderr), /^error: kernel cache .*cpu is writable by others: refusing/m);
      assert.ok(!dec(refused.stderr).includes("    at "), dec(refused.stderr));
    }),
});
