/**
 * The text endpoints answer exactly what `deno task infer` prints for the same input (both go through
 * textinfer/), on the tiny checkpoints of each head.
 */
import assert from "node:assert/strict";
import { runCli } from "../util/cli.ts";
import { referenceBackend, serveForTest, TINY } from "../util/serve.ts";

async function inferPrints(head: string, ...args: string[]): Promise<unknown> {
  const r = await runCli("infer.ts", ["--checkpoint", `${TINY}/${head}`, "--backend", "reference", ...args]);
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout.trim());
}

const CONTEXT = "The quick brown fox jumped over the lazy dog near the river bank, and then it ran home. " +
  "Nobody saw where it went after that, but the dog remembered the fox for a long time. ".repeat(3);

Deno.test("POST /v1/qa equals deno task infer --question --context (a context over several windows)", async () => {
  const s = await serveForTest("qa", referenceBackend());
  try {
    const question = "Where did the fox go?";
    const r = await s.post("/v1/qa", { question, context: CONTEXT });
    assert.equal(r.status, 200, r.text);
    const a = r.body as { answer: string; start: number; end: number; score: number; windows: number };
    assert.equal(CONTEXT.slice(a.start, a.end), a.answer);
    assert.ok(a.score > 0 && a.score <= 1);
    assert.ok(a.windows > 1, `the 64-position model needs several windows, got ${a.windows}`);
    assert.deepEqual(r.body, await inferPrints("qa", "--question", question, "--context", CONTEXT));
    const withId = await s.post("/v1/qa", { id: "q7", question, context: CONTEXT });
    assert.deepEqual(withId.body, { id: "q7", ...a });
  } finally {
    await s.close();
  }
});

Deno.test("POST /v1/classify equals deno task infer --text --text-pair", async () => {
  const s = await serveForTest("classification", referenceBackend());
  try {
    for (const body of [{ text: "what a lovely day" }, { text: "the fox ran", text_pair: "the dog slept" }]) {
      const r = await s.post("/v1/classify", body);
      assert.equal(r.status, 200, r.text);
      const a = r.body as { label: string; scores: Record<string, number> };
      assert.deepEqual(Object.keys(a.scores), ["negative", "neutral", "positive"]);
      assert.ok(Math.abs(Object.values(a.scores).reduce((x, y) => x + y) - 1) < 1e-9);
      const args = ["--text", body.text, ...(body.text_pair ? ["--text-pair", body.text_pair] : [])];
      assert.deepEqual(r.body, await inferPrints("classification", ...args));
    }
    assert.equal((await s.post("/v1/qa", { question: "a", context: "b" })).status, 404);
  } finally {
    await s.close();
  }
});

Deno.test("POST /v1/fill-mask equals deno task infer --text with [MASK] and --top-k", async () => {
  const s = await serveForTest("pretraining", referenceBackend());
  try {
    const text = "the quick [MASK] fox jumped over the [MASK] dog";
    const r = await s.post("/v1/fill-mask", { text, top_k: 3 });
    assert.equal(r.status, 200, r.text);
    const a = r.body as { masks: { token: string; score: number }[][] };
    assert.equal(a.masks.length, 2);
    assert.ok(a.masks.every((m) => m.length === 3));
    assert.deepEqual(r.body, await inferPrints("pretraining", "--text", text, "--top-k", "3"));
    const noMask = await s.post("/v1/fill-mask", { text: "no mask here" });
    assert.equal(noMask.status, 400, noMask.text);
    const badK = await s.post("/v1/fill-mask", { text, top_k: 0 });
    assert.equal(badK.status, 400, badK.text);
  } finally {
    await s.close();
  }
});
