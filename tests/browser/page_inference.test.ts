/**
 * The page runs BERT-tiny on WebGPU in headless Chromium for the three heads, and agrees with the
 * reference interpreter (f32, in Deno) to 1e-4 on the fixture's token rows; its text answers (a question,
 * a sentence, a masked text) are those the reference gives through the same textinfer/ code. Also prints
 * the bundle size and the time from page load to the first answer.
 */
import assert from "node:assert/strict";
import { defineBert, type Head, INFER_OUTPUTS } from "../../models/bert.ts";
import { readBertConfig } from "../../models/bert_config.ts";
import { loadHfWeights } from "../../model_io/hf_checkpoint.ts";
import { type EncodedRow, parseEncodedRows } from "../../model_io/infer_input.ts";
import { referenceBackend } from "../../runtime/reference/reference_backend.ts";
import { runInference } from "../../runtime/infer.ts";
import { answerRequests, type InferRequest } from "../../textinfer/mod.ts";
import { openTextModel } from "../../textinfer/checkpoint.ts";
import { noBrowser, withPage } from "./browser_env.ts";
import { servePage } from "./page_server.ts";

const TINY = new URL("../fixtures/hf-tiny/", import.meta.url).pathname;
const HEADS: Head[] = ["qa", "classification", "pretraining"];
const REQUESTS: Record<Head, InferRequest> = {
  qa: {
    kind: "qa",
    question: "who read a book ?",
    context: "john grew up in paris . mary read a book in canada .",
  },
  classification: { kind: "text", text: "the film was not very good", text_pair: "i love it" },
  pretraining: { kind: "text", text: "mary [MASK] a book in [MASK] ." },
};

/** The reference's outputs and text answer for one tiny checkpoint. */
async function reference(head: Head, rows: EncodedRow[]) {
  const dir = `${TINY}${head}`;
  const config = readBertConfig(`${dir}/config.json`);
  const model = defineBert(head, config);
  const graphFor = (b: number, s: number) => model.build({ head, mode: "infer", batchSize: b, seqLen: s });
  const weights = await loadHfWeights(graphFor(1, 1), dir);
  const run = (rs: EncodedRow[]) =>
    runInference(rs, {
      batchSize: rs.length,
      outputs: INFER_OUTPUTS[head],
      graphFor,
      backend: referenceBackend("f32"),
      weights,
    });
  const text = await openTextModel(dir, config, head, run);
  const [answer] = await answerRequests(text, [{ request: REQUESTS[head], at: "test" }]);
  return { outputs: await run(rows), answer };
}

type PageOutputs = Record<string, { shape: number[]; data: number[] }>;

Deno.test({
  name: "the page answers with BERT-tiny on WebGPU in Chromium as the reference interpreter does (3 heads)",
  ignore: noBrowser !== undefined,
  sanitizeResources: false,
  fn: async () => {
    const rows = parseEncodedRows(await Deno.readTextFile(`${TINY}inputs.jsonl`), "inputs.jsonl", {
      vocabSize: 99,
      typeVocabSize: 2,
      maxPositions: 64,
    });
    const page = await servePage();
    try {
      await withPage(page.url, async ({ page: p }) => {
        await p.evaluate("bertfuse.ready");
        const first = await p.evaluate<number>("bertfuse.firstAnswerMs()");
        const adapter = await p.evaluate<string>("bertfuse.adapter()");
        console.log(
          `bundle ${page.build.bundleBytes} bytes (${page.build.gzipBytes} gzipped); adapter ${adapter}; ` +
            `first answer ${first.toFixed(0)} ms after page load`,
        );
        for (const head of HEADS) {
          const ref = await reference(head, rows);
          await p.evaluate(`bertfuse.useTiny(${JSON.stringify(head)})`);
          const got = await p.evaluate<PageOutputs>(`bertfuse.runRows(${JSON.stringify(rows)})`);
          for (const [name, want] of ref.outputs) {
            const g = got[name];
            assert.ok(g, `${head}: the page gave no ${name}`);
            assert.deepEqual(g.shape, want.shape, `${head} ${name} shape`);
            let worst = 0;
            for (let i = 0; i < want.data.length; i++) {
              worst = Math.max(worst, Math.abs(g.data[i] - want.data[i]));
            }
            console.log(
              `  ${head} ${name} [${want.shape}]: max |page - reference| = ${worst.toExponential(2)}`,
            );
            assert.ok(worst <= 1e-4, `${head} ${name}: max difference ${worst} over 1e-4`);
          }
          const answer = await p.evaluate<Record<string, unknown>>(
            `bertfuse.ask(${JSON.stringify(REQUESTS[head])})`,
          );
          assertSameAnswer(head, answer, ref.answer as unknown as Record<string, unknown>);
        }
      });
    } finally {
      await page.close();
    }
  },
});

/** Same answer: labels, spans and tokens equal; probabilities to 1e-4. */
function assertSameAnswer(head: Head, got: Record<string, unknown>, want: Record<string, unknown>): void {
  const close = (a: unknown, b: unknown, path: string): void => {
    if (typeof a === "number" && typeof b === "number") {
      assert.ok(Math.abs(a - b) <= 1e-4, `${head} answer ${path}: ${a} vs ${b}`);
    } else if (Array.isArray(a) && Array.isArray(b)) {
      assert.equal(a.length, b.length, `${head} answer ${path} length`);
      a.forEach((x, i) => close(x, b[i], `${path}[${i}]`));
    } else if (a && b && typeof a === "object" && typeof b === "object") {
      assert.deepEqual(Object.keys(a).sort(), Object.keys(b).sort(), `${head} answer ${path} fields`);
      for (const k of Object.keys(b)) {
        close((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], `${path}.${k}`);
      }
    } else assert.equal(a, b, `${head} answer ${path}`);
  };
  close(got, want, "");
}
