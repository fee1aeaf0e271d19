/**
 * A server in the test process on a tiny checkpoint (port 0, loopback), with helpers that always read
 * the response body (Deno's resource sanitizer requires it) and a drain at the end.
 */
import type { Backend } from "../../runtime/backend.ts";
import { REFERENCE } from "../../engine/backends.ts";
import { ServedModel } from "../../serve/served_model.ts";
import { type Server, startServer } from "../../serve/server.ts";
import { textRoutes } from "../../serve/text_routes.ts";
import { ROOT } from "./cli.ts";
import assert from "node:assert/strict";
import { seededRandom } from "../../cases/random.ts";

export const TINY = `${ROOT}tests/fixtures/hf-tiny`;
/** The reference interpreter as serve and infer open it (engine/backends.ts: composite ops decomposed). */
export const referenceBackend = (): Backend => REFERENCE.graphBackend({ description: "reference" }, {});

export interface TestServerOptions {
  maxBatch?: number;
  maxDelayMs?: number;
  maxQueue?: number;
  maxBodyBytes?: number;
  buckets?: number[];
  bodyTimeoutMs?: number;
  maxInFlight?: number;
  grpcPort?: number;
}

export interface Reply {
  status: number;
  headers: Headers;
  body: unknown;
  text: string;
}

export interface TestServer {
  url: string;
  server: Server;
  model: ServedModel;
  logs: string[];
  get(path: string): Promise<Reply>;
  post(path: string, body: unknown, init?: RequestInit): Promise<Reply>;
  close(): Promise<void>;
}

async function reply(r: Response): Promise<Reply> {
  const text = await r.text();
  let body: unknown = undefined;
  try {
    body = JSON.parse(text);
  } catch { /* /metrics is text */ }
  return { status: r.status, headers: r.headers, body, text };
}

export async function serveForTest(
  head: "qa" | "classification" | "pretraining",
  backend: Backend,
  opts: TestServerOptions = {},
): Promise<TestServer> {
  const logs: string[] = [];
  const log = (l: string) => logs.push(l);
  const model = await ServedModel.load(`${TINY}/${head}`, {
    name: head,
    backend,
    maxBatch: opts.maxBatch ?? 4,
    buckets: opts.buckets,
  });
  const server = await startServer(model, {
    hostname: "127.0.0.1",
    port: 0,
    maxDelayMs: opts.maxDelayMs ?? 2,
    maxQueue: opts.maxQueue ?? 64,
    maxBodyBytes: opts.maxBodyBytes ?? 1 << 20,
    bodyTimeoutMs: opts.bodyTimeoutMs,
    maxInFlight: opts.maxInFlight,
    grpcPort: opts.grpcPort,
    log,
    extraRoutes: (ctx) => textRoutes(ctx, {}, log),
  });
  await server.ready;
  const url = `http://127.0.0.1:${server.addr.port}`;
  return {
    url,
    server,
    model,
    logs,
    get: async (path) => reply(await fetch(url + path)),
    post: async (path, body, init = {}) =>
      reply(
        await fetch(url + path, {
          method: "POST",
          body: typeof body === "string" ? body : JSON.stringify(body),
          headers: { "content-type": "application/json" },
          ...init,
        }),
      ),
    close: () => server.drain(),
  };
}

/** A KServe v2 request for token-id rows of one length. */
export function kserveRequest(
  rows: { input_ids: number[]; token_type_ids?: number[]; attention_mask?: number[] }[],
) {
  const n = rows.length, s = rows[0].input_ids.length;
  const tensor = (name: string, pick: (r: (typeof rows)[number]) => number[] | undefined) => ({
    name,
    shape: [n, s],
    datatype: "INT64",
    data: rows.flatMap((r) => pick(r) ?? []),
  });
  const inputs = [tensor("input_ids", (r) => r.input_ids)];
  if (rows[0].token_type_ids) inputs.push(tensor("token_type_ids", (r) => r.token_type_ids));
  if (rows[0].attention_mask) inputs.push(tensor("attention_mask", (r) => r.attention_mask));
  return { inputs };
}

/** The rows of tests/fixtures/hf-tiny/inputs.jsonl. */
export async function fixtureRows() {
  const text = await Deno.readTextFile(`${TINY}/inputs.jsonl`);
  return text.trim().split("\n").map((l) =>
    JSON.parse(l) as { input_ids: number[]; token_type_ids: number[]; attention_mask: number[] }
  );
}

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

/**
 * The same sequences one at a time and all at once (12 KServe rows over two buckets, then 4 QA texts of
 * one to four windows) give bit-identical answers, and the concurrent ones really were batched.
 */
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
