/**
 * Batching never changes an answer: the same sequences sent one at a time (each alone in its batch) and
 * all at once (batched with each other, across buckets) give bit-identical outputs. Exported for the
 * WebGPU tier, which runs the same check on lavapipe.
 */
import assert from "node:assert/strict";
import { referenceBackend } from "../../runtime/reference/backend.ts";
import type { Backend } from "../../runtime/backend.ts";
import { kserveRequest, type Reply, serveForTest } from "../util/serve.ts";
import { seededRandom } from "../../cases/random.ts";

type Tensor = { name: string; data: number[] };

/** Rows of many lengths (two buckets), random ids, some with a second segment and masked tail. */
function randomRows(n: number, seed: number) {
  const rand = seededRandom(seed).uniform;
  return Array.from({ length: n }, (_, i) => {
    const len = 3 + Math.floor(rand() * 28);
    const input_ids = Array.from({ length: len }, (_, k) => k === 0 ? 2 : 1 + Math.floor(rand() * 98));
    const split = i % 2 ? Math.floor(len / 2) : len;
    const token_type_ids = input_ids.map((_, k) => (k >= split ? 1 : 0));
    const attention_mask = input_ids.map((_, k) => (i % 3 === 0 && k >= len - 2 ? 0 : 1));
    return { input_ids, token_type_ids, attention_mask };
  });
}

export async function checkBatchingInvariance(backend: Backend) {
  const s = await serveForTest("qa", backend, { maxBatch: 8, maxDelayMs: 50 });
  try {
    const rows = randomRows(12, 7);
    const infer = (r: (typeof rows)[number]) => s.post("/v2/models/qa/infer", kserveRequest([r]));
    const single: Reply[] = [];
    for (const r of rows) single.push(await infer(r));
    const before = s.server.metrics.batchSize;
    const sizesBefore = before.render();
    const together = await Promise.all(rows.map(infer));
    // The concurrent requests really were batched: some batch held more than one sequence.
    const batchLines = s.server.metrics.batchSize.render();
    assert.notDeepEqual(batchLines, sizesBefore);
    const ones = (lines: string[]) => Number(lines.find((l) => l.includes('le="1"'))!.split(" ")[1]);
    const count = (lines: string[]) => Number(lines.find((l) => l.includes("_count"))!.split(" ")[1]);
    const newBatches = count(batchLines) - count(sizesBefore);
    assert.ok(newBatches < rows.length, `12 requests ran as ${newBatches} batches`);
    assert.ok(ones(batchLines) - ones(sizesBefore) < newBatches);
    rows.forEach((_, i) => {
      assert.equal(single[i].status, 200, single[i].text);
      assert.equal(together[i].status, 200, together[i].text);
      const a = (single[i].body as { outputs: Tensor[] }).outputs;
      const b = (together[i].body as { outputs: Tensor[] }).outputs;
      for (const k of [0, 1]) {
        assert.equal(a[k].name, b[k].name);
        // JSON numbers from float32 values: equal strings mean equal bits.
        assert.deepEqual(b[k].data, a[k].data, `row ${i} ${a[k].name}`);
      }
    });
    // Text answers too: QA on several contexts, one by one and all at once.
    const qs = ["who jumped?", "where is it?", "what colour is the fox?", "why?"].map((question, i) => ({
      question,
      context: "The quick brown fox jumped over the lazy dog near the river bank. ".repeat(i + 1),
    }));
    const one: Reply[] = [];
    for (const q of qs) one.push(await s.post("/v1/qa", q));
    const all = await Promise.all(qs.map((q) => s.post("/v1/qa", q)));
    qs.forEach((_, i) => {
      assert.equal(one[i].status, 200, one[i].text);
      assert.deepEqual(all[i].body, one[i].body);
    });
  } finally {
    await s.close();
  }
}

Deno.test("batching never changes an answer (reference backend)", () =>
  checkBatchingInvariance(referenceBackend()));
