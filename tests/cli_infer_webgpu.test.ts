/** `deno task infer --backend webgpu` matches the PyTorch fixture, like the reference backend does. */
import assert from "node:assert/strict";
import { readSafetensorsFile, toFloat64 } from "../runtime/checkpoint/safetensors.ts";
import { testGpu } from "./util/webgpu.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const FX = `${ROOT}tests/fixtures/hf-tiny/`;
const gpu = await testGpu();

async function infer(...args: string[]) {
  const env: Record<string, string> = { NO_COLOR: "1" };
  for (const k of ["DENO_WEBGPU_BACKEND", "XDG_RUNTIME_DIR"]) {
    const v = Deno.env.get(k);
    if (v) env[k] = v;
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-read", "--allow-write", "--allow-env", `${ROOT}cli/infer.ts`, ...args],
    cwd: ROOT,
    env,
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

for (const fuse of [true, false]) {
  Deno.test({
    name: `infer --backend webgpu${
      fuse ? "" : " --no-fuse"
    } matches the fixture (classification and qa heads)`,
    ignore: !gpu.ctx,
    fn: async () => {
      const dir = await Deno.makeTempDir();
      try {
        for (
          const [head, names] of [["classification", ["logits"]], ["qa", [
            "start_logits",
            "end_logits",
          ]]] as const
        ) {
          const r = await infer(
            "--backend",
            "webgpu",
            ...(fuse ? [] : ["--no-fuse"]),
            "--checkpoint",
            `${FX}${head}`,
            "--input",
            `${FX}inputs.jsonl`,
            "--output",
            `${dir}/${head}.safetensors`,
            "--batch-size",
            "3",
          );
          assert.equal(r.code, 0, r.stderr);
          assert.match(r.stdout, /backend webgpu/);
          const got = (await readSafetensorsFile(`${dir}/${head}.safetensors`)).tensors;
          const want = (await readSafetensorsFile(`${FX}expected.safetensors`)).tensors;
          for (const name of names) {
            const a = toFloat64(got.get(name)!), e = toFloat64(want.get(`${head}.${name}`)!);
            const scale = Math.max(...e.map(Math.abs));
            e.forEach((v, i) =>
              assert.ok(Math.abs(a[i] - v) <= 2e-5 * scale, `${head}.${name}[${i}]: ${a[i]} vs ${v}`)
            );
          }
        }
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

Deno.test("infer --no-fuse without --backend webgpu is a usage error", async () => {
  const r = await infer("--no-fuse");
  assert.equal(r.code, 1);
  assert.match(r.stderr, /^error: --no-fuse applies to --backend webgpu/);
});
