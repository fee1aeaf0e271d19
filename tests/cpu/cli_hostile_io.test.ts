/**
 * Full and read-only disks (issue 13): a 64 KiB tmpfs and a read-only bind mount, where this test may mount
 * them (root in a container, as CI runs); elsewhere the test is ignored with the reason. Each command must
 * print one line naming the path and the cause, exit 1, and leave nothing partial behind.
 */
import assert from "node:assert/strict";
import { mayMount, ROOT, runCli, sh, withTemp } from "../util/cli.ts";

const canMount = await mayMount();

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
      const full = `${dir}/full`, ro = `${dir}/ro`, tiny = `${ROOT}models/bert-tiny.ts`;
      const names = (d: string) => [...Deno.readDirSync(d)].map((e) => e.name).sort();
      await Deno.mkdir(full);
      await Deno.mkdir(ro);
      try {
        assert.ok(await sh("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", full));
        assert.ok(await sh("mount", "--bind", "-o", "ro", ro, ro));
        // bert-tiny's kernels are several hundred KiB: the disk fills mid-way.
        const noSpace = /full\/k: cannot write \(no space left on device\)/;
        refused(await runCli("compile.ts", [tiny, "--out", `${full}/k`]), noSpace);
        assert.deepEqual(names(full), [], "a partial output was left");
        // prepare-data (F06): no shard, no folder left, nor the parents it made.
        await Deno.writeTextFile(`${dir}/t.txt`, "the cat sat on the mat .\na dog ran .\n\n".repeat(3000));
        const prepare = ["--input", `${dir}/t.txt`, "--output", `${full}/a/s`, "--quiet"];
        refused(await runCli("prepare_data.ts", prepare), /s\/\.partial-\d+\/shard-0+\.bin: no space left/);
        assert.deepEqual(names(full), [], "a partial output was left");
        // finetune: the checkpoint named; the run folder stays (run.json, metrics.jsonl), nothing partial.
        const ft = ["--init-checkpoint", `${ROOT}tests/fixtures/hf-tiny/pretraining`, "--output-dir"];
        ft.push(`${full}/f`, ..."--backend reference --max-steps 1 --do-train --train-limit 8".split(" "));
        const perms = ["--allow-read", "--allow-write", "--allow-env", "--allow-ffi", "--allow-run"];
        const ckpt = /f\/ckpt_1: cannot write the checkpoint \(no space left on device\)$/;
        refused(await runCli("finetune.ts", ft, perms), ckpt);
        assert.deepEqual(names(`${full}/f`), ["metrics.jsonl", "run.json"]);
        const readOnly = /^error: .*ro\/k: cannot write \(read-only file system\)/;
        refused(await runCli("compile.ts", [tiny, "--out", `${ro}/k`]), readOnly);
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
        await sh("umount", full);
      }
    }),
});
