/**
 * Full and read-only disks (issue 13): a 64 KiB tmpfs and a read-only bind mount, where this test may mount
 * them (root in a container, as CI runs); elsewhere the test is ignored with the reason. Each command must
 * print one line naming the path and the cause, exit 1, and leave nothing partial behind.
 */
import assert from "node:assert/strict";
import { ROOT, runCli, withTemp } from "../util/cli.ts";

async function sh(...args: string[]): Promise<boolean> {
  try {
    return (await new Deno.Command(args[0], { args: args.slice(1), stderr: "null", stdout: "null" }).output())
      .success;
  } catch {
    return false;
  }
}

const probe = await Deno.makeTempDir();
// Trying the mount is the test of whether we may (Deno.uid() would need --allow-sys, which the test task
// does not grant); a user who may not mount gets a quick failure.
const canMount = await sh("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe);
if (canMount) await sh("umount", probe);
await Deno.remove(probe);

function refused(r: { code: number; stderr: string }, re: RegExp): void {
  assert.equal(r.code, 1, r.stderr);
  // Progress lines may come first (compile says what it compiles); the failure is the one error line, last.
  const lines = r.stderr.trim().split("\n");
  assert.equal(lines.filter((l) => l.startsWith("error: ")).length, 1, r.stderr);
  assert.doesNotMatch(r.stderr, /^\s+at /m, "a stack trace");
  assert.match(lines.at(-1)!, re);
}

Deno.test({
  name: "full and read-only disks: one line naming the path and the cause, nothing partial left",
  ignore: !canMount,
  fn: () =>
    withTemp(async (dir) => {
      const full = `${dir}/full`, ro = `${dir}/ro`;
      await Deno.mkdir(full);
      await Deno.mkdir(ro);
      assert.ok(await sh("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", full));
      try {
        assert.ok(await sh("mount", "--bind", "-o", "ro", ro, ro));
        try {
          // bert-tiny's kernels are several hundred KiB: the disk fills mid-way.
          refused(
            await runCli("compile.ts", [`${ROOT}models/bert-tiny.ts`, "--out", `${full}/k`]),
            /^error: .*full\/k: cannot write \(no space left on device\)/,
          );
          assert.deepEqual([...Deno.readDirSync(full)], [], "a partial output was left");
          refused(
            await runCli("compile.ts", [`${ROOT}models/bert-tiny.ts`, "--out", `${ro}/k`]),
            /^error: .*ro\/k: cannot write \(read-only file system\)/,
          );
          refused(
            await runCli("infer.ts", ["--output", `${ro}/o.safetensors`]),
            /^error: .*ro\/o\.safetensors: cannot write \(read-only file system\)/,
          );
          await Deno.writeTextFile(`${dir}/t.txt`, "hello world\n");
          refused(
            await runCli("tokenize.ts", ["--input", `${dir}/t.txt`, "--output", `${ro}/o.jsonl`]),
            /^error: cannot write .*ro\/o\.jsonl: read-only file system/,
          );
        } finally {
          await sh("umount", ro);
        }
      } finally {
        await sh("umount", full);
      }
    }),
});
