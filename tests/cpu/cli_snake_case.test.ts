/**
 * Every command accepts NVIDIA's snake_case spelling of its flags (cli/flag_spelling.ts): `deno task infer`
 * given `--batch_size` answers exactly as with `--batch-size`, and a snake_case flag that a check refuses
 * is named in kebab case, proving it reached the parser as that flag rather than as an unknown one.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { ROOT, runCli } from "../util/cli.ts";

const CKPT = join(ROOT, "tests/fixtures/hf-tiny/classification");

Deno.test("infer: --batch_size is --batch-size", async () => {
  const args = ["--checkpoint", CKPT, "--text", "a fine day", "--backend", "reference"];
  const kebab = await runCli("infer.ts", [...args, "--batch-size", "1"]);
  const snake = await runCli("infer.ts", [...args, "--batch_size", "1"]);
  assert.equal(kebab.code, 0, kebab.stderr);
  assert.equal(snake.code, 0, snake.stderr);
  assert.match(snake.stdout, /"label"/);
  assert.equal(snake.stdout, kebab.stdout);
});

Deno.test("infer: --no_fuse is --no-fuse (refused by name for the reference backend)", async () => {
  const r = await runCli("infer.ts", [
    "--checkpoint",
    CKPT,
    "--text",
    "x",
    "--backend",
    "reference",
    "--no_fuse",
  ]);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /--no-fuse applies to --backend webgpu/);
});

Deno.test("infer: a Hugging Face flag name gets one line naming ours", async () => {
  const r = await runCli("infer.ts", ["--model_name_or_path", CKPT, "--text", "a fine day"]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /^error: .*Hugging Face's name, here: .*--checkpoint DIR \(infer, serve\).*\n$/);
});
