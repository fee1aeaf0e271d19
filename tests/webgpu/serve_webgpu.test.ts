/**
 * The server on WebGPU (lavapipe in CI): KServe v2 inference matches the PyTorch fixture, batching never
 * changes an answer, and /v1/qa gives the reference backend's answer.
 */
import assert from "node:assert/strict";
import { readSafetensorsFile, toFloat64 } from "../../model_io/safetensors.ts";
import { openBackend } from "../../engine/choose_backend.ts";
import { checkBatchingInvariance, fixtureRows, kserveRequest, serveForTest, TINY } from "../util/serve.ts";
import { referenceBackend } from "../util/serve.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();
const webgpu = async () => (await openBackend("webgpu")).graphBackend({ fuse: true });

type Tensor = { name: string; shape: number[]; data: number[] };

Deno.test({
  name: "serve on webgpu: KServe v2 infer of all fixture rows in one request matches PyTorch",
  ignore: !gpu.ctx,
  fn: async () => {
    const s = await serveForTest("qa", await webgpu());
    try {
      const rows = await fixtureRows();
      // One request of [4, 12]: each row padded by the user, as a KServe client sends a batch.
      const padded = rows.map((r) => {
        const pad = (a: number[]) => [...a, ...new Array(12 - a.length).fill(0)];
        return {
          input_ids: pad(r.input_ids),
          token_type_ids: pad(r.token_type_ids),
          attention_mask: pad(r.attention_mask),
        };
      });
      const r = await s.post("/v2/models/qa/infer", kserveRequest(padded));
      assert.equal(r.status, 200, r.text);
      const want = (await readSafetensorsFile(`${TINY}/expected.safetensors`)).tensors;
      for (const t of (r.body as { outputs: Tensor[] }).outputs) {
        assert.deepEqual(t.shape, [4, 12]);
        const e = toFloat64(want.get(`qa.${t.name}`)!);
        const scale = Math.max(...e.map(Math.abs));
        rows.forEach((row, i) => {
          // Positions past a row's own length are the user's padding: computed, not compared.
          for (let k = 0; k < row.input_ids.length; k++) {
            const got = t.data[i * 12 + k], exp = e[i * 12 + k];
            assert.ok(Math.abs(got - exp) <= 2e-5 * scale, `${t.name}[${i},${k}]: ${got} vs ${exp}`);
          }
        });
      }
    } finally {
      await s.close();
    }
  },
});

Deno.test({
  name: "serve on webgpu: batching never changes an answer",
  ignore: !gpu.ctx,
  fn: async () => checkBatchingInvariance(await webgpu()),
});

Deno.test({
  name: "serve on webgpu: /v1/qa gives the reference backend's answer",
  ignore: !gpu.ctx,
  fn: async () => {
    const body = {
      question: "where did the fox go?",
      context: "The quick brown fox jumped over the lazy dog near the river bank, and then it ran home. "
        .repeat(3),
    };
    const answers = [];
    for (const backend of [await webgpu(), referenceBackend()]) {
      const s = await serveForTest("qa", backend, { maxBatch: 2 });
      try {
        const r = await s.post("/v1/qa", body);
        assert.equal(r.status, 200, r.text);
        answers.push(r.body as { answer: string; start: number; end: number; score: number });
      } finally {
        await s.close();
      }
    }
    const [gpuAnswer, refAnswer] = answers;
    assert.deepEqual([gpuAnswer.answer, gpuAnswer.start, gpuAnswer.end], [
      refAnswer.answer,
      refAnswer.start,
      refAnswer.end,
    ]);
    assert.ok(Math.abs(gpuAnswer.score - refAnswer.score) < 1e-4, `${gpuAnswer.score} vs ${refAnswer.score}`);
  },
});
