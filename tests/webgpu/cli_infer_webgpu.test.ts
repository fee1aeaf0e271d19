/** `deno task infer --backend webgpu` matches the PyTorch fixture, like the reference backend does. */
import assert from "node:assert/strict";
import { readSafetensorsFile, toFloat64 } from "../../model_io/safetensors.ts";
import { ROOT, runCli, withTemp } from "../util/cli.ts";
import { testGpu } from "../util/webgpu.ts";

const FX = `${ROOT}tests/fixtures/hf-tiny/`;
const gpu = await testGpu();
const infer = (...args: string[]) => runCli("infer.ts", args);
const HEADS = { classification: ["logits"], qa: ["start_logits", "end_logits"] } as const;

for (const fuse of [true, false]) {
  const flag = fuse ? "" : " --no-fuse";
  Deno.test({
    name: `infer --backend webgpu${flag} matches the fixture (classification and qa heads)`,
    ignore: !gpu.ctx,
    fn: () =>
      withTemp(async (dir) => {
        for (const [head, names] of Object.entries(HEADS)) {
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
      }),
  });
}

Deno.test("infer --no-fuse with --backend reference is a usage error", async () => {
  const r = await infer("--backend", "reference", "--no-fuse");
  assert.equal(r.code, 1);
  assert.match(r.stderr, /^error: --no-fuse applies to --backend webgpu/);
});
