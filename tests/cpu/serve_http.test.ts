/** The server's KServe v2 endpoints, its errors and its metrics, on the reference backend. */
import assert from "node:assert/strict";
import { readSafetensorsFile, toFloat64 } from "../../model_io/safetensors.ts";
import { fixtureRows, kserveRequest, referenceBackend, serveForTest, TINY } from "../util/serve.ts";

type Obj = Record<string, unknown>;
type Tensor = { name: string; shape: number[]; datatype: string; data: number[] };

Deno.test("health, server and model metadata", async () => {
  const s = await serveForTest("qa", referenceBackend());
  try {
    assert.equal((await s.get("/v2/health/live")).status, 200);
    assert.equal((await s.get("/v2/health/ready")).status, 200);
    assert.equal((await s.get("/v2/models/qa/ready")).status, 200);
    assert.deepEqual((await s.get("/v2")).body, {
      name: "bertfuse",
      version: "1",
      extensions: ["binary_tensor_data"],
    });
    const meta = (await s.get("/v2/models/qa")).body as Obj;
    assert.equal(meta.name, "qa");
    assert.deepEqual(meta.versions, ["1"]);
    assert.deepEqual((meta.inputs as Obj[]).map((i) => [i.name, i.datatype, i.shape]), [
      ["input_ids", "INT32", [-1, -1]],
      ["attention_mask", "INT32", [-1, -1]],
      ["token_type_ids", "INT32", [-1, -1]],
    ]);
    assert.deepEqual((meta.outputs as Obj[]).map((o) => [o.name, o.datatype, o.shape]), [
      ["start_logits", "FP32", [-1, -1]],
      ["end_logits", "FP32", [-1, -1]],
    ]);
    assert.deepEqual((await s.get("/v2/models/qa/versions/1")).body, meta);
  } finally {
    await s.close();
  }
});

Deno.test("metadata of the classification and pre-training heads", async () => {
  for (
    const [head, want] of [
      ["classification", [["logits", [-1, 3]]]],
      ["pretraining", [["prediction_logits", [-1, -1, 99]], ["seq_relationship_logits", [-1, 2]]]],
    ] as const
  ) {
    const s = await serveForTest(head, referenceBackend(), { maxBatch: 1 });
    try {
      const meta = (await s.get(`/v2/models/${head}`)).body as Obj;
      assert.deepEqual((meta.outputs as Obj[]).map((o) => [o.name, o.shape]), want);
    } finally {
      await s.close();
    }
  }
});

Deno.test("KServe v2 infer matches the PyTorch fixture, rows of every length, one request per row", async () => {
  const s = await serveForTest("qa", referenceBackend());
  try {
    const want = (await readSafetensorsFile(`${TINY}/expected.safetensors`)).tensors;
    const rows = await fixtureRows();
    for (const [i, row] of rows.entries()) {
      const r = await s.post("/v2/models/qa/infer", { id: `row${i}`, ...kserveRequest([row]) });
      assert.equal(r.status, 200, r.text);
      const body = r.body as { model_name: string; id: string; outputs: Tensor[] };
      assert.equal(body.model_name, "qa");
      assert.equal(body.id, `row${i}`);
      for (const name of ["start_logits", "end_logits"]) {
        const t = body.outputs.find((o) => o.name === name)!;
        assert.deepEqual([t.datatype, t.shape], ["FP32", [1, row.input_ids.length]]);
        const e = toFloat64(want.get(`qa.${name}`)!).slice(i * 12, i * 12 + row.input_ids.length);
        const scale = Math.max(...e.map(Math.abs));
        e.forEach((v, k) => assert.ok(Math.abs(t.data[k] - v) <= 1e-5 * scale, `${name}[${i},${k}]`));
      }
    }
  } finally {
    await s.close();
  }
});

Deno.test("infer: nested data, INT32, defaults for mask and types, and a chosen output", async () => {
  const s = await serveForTest("qa", referenceBackend());
  try {
    const ids = [[2, 5, 6, 7], [2, 9, 8, 1]];
    const full = await s.post("/v2/models/qa/infer", {
      inputs: [
        { name: "input_ids", shape: [2, 4], datatype: "INT32", data: ids },
        { name: "attention_mask", shape: [2, 4], datatype: "INT32", data: [1, 1, 1, 1, 1, 1, 1, 1] },
        { name: "token_type_ids", shape: [2, 4], datatype: "INT32", data: [0, 0, 0, 0, 0, 0, 0, 0] },
      ],
    });
    const short = await s.post("/v2/models/qa/infer", {
      inputs: [{ name: "input_ids", shape: [2, 4], datatype: "INT64", data: ids.flat() }],
      outputs: [{ name: "end_logits" }],
    });
    assert.equal(full.status, 200, full.text);
    assert.equal(short.status, 200, short.text);
    const outs = (short.body as { outputs: Tensor[] }).outputs;
    assert.deepEqual(outs.map((o) => o.name), ["end_logits"]);
    const fullEnd = (full.body as { outputs: Tensor[] }).outputs.find((o) => o.name === "end_logits")!;
    assert.deepEqual(outs[0], fullEnd);
  } finally {
    await s.close();
  }
});

const ids5 = { name: "input_ids", shape: [1, 5], datatype: "INT64", data: [2, 5, 6, 7, 8] };

Deno.test("bad requests get a JSON error with the right 4xx status", async () => {
  const s = await serveForTest("qa", referenceBackend(), { maxBodyBytes: 4096 });
  const infer = "/v2/models/qa/infer";
  const cases: [string, () => ReturnType<typeof s.get>, number, RegExp][] = [
    ["malformed JSON", () => s.post(infer, '{"inputs": ['), 400, /not valid JSON/],
    ["empty body", () => s.post(infer, ""), 400, /empty/],
    ["an array body", () => s.post(infer, [1, 2]), 400, /must be a JSON object, got an array/],
    ["unknown field", () => s.post(infer, { inputs: [ids5], extra: 1 }), 400, /unknown field 'extra'/],
    ["no inputs", () => s.post(infer, { inputs: [] }), 400, /'inputs' must be a non-empty array/],
    [
      "unknown input",
      () => s.post(infer, { inputs: [{ ...ids5, name: "pixels" }] }),
      400,
      /unknown input 'pixels'/,
    ],
    [
      "missing input_ids",
      () => s.post(infer, { inputs: [{ ...ids5, name: "attention_mask" }] }),
      400,
      /missing input 'input_ids'/,
    ],
    [
      "float datatype",
      () => s.post(infer, { inputs: [{ ...ids5, datatype: "FP32" }] }),
      400,
      /datatype must be INT32 or INT64/,
    ],
    ["1-D shape", () => s.post(infer, { inputs: [{ ...ids5, shape: [5] }] }), 400, /shape must be \[N, S\]/],
    [
      "count mismatch",
      () => s.post(infer, { inputs: [{ ...ids5, shape: [1, 6] }] }),
      400,
      /needs 6 values, got 5/,
    ],
    [
      "a string id",
      () => s.post(infer, { inputs: [{ ...ids5, data: [2, "5", 6, 7, 8] }] }),
      400,
      /element 1 is "5", not an integer/,
    ],
    [
      "id outside the vocabulary",
      () => s.post(infer, { inputs: [{ ...ids5, data: [2, 99, 6, 7, 8] }] }),
      400,
      /outside the vocabulary \[0, 99\)/,
    ],
    [
      "mask of 2",
      () =>
        s.post(infer, {
          inputs: [ids5, { name: "attention_mask", shape: [1, 5], datatype: "INT32", data: [1, 1, 2, 1, 1] }],
        }),
      400,
      /outside the mask values/,
    ],
    [
      "shapes disagree",
      () =>
        s.post(infer, {
          inputs: [ids5, { name: "attention_mask", shape: [1, 4], datatype: "INT32", data: [1, 1, 1, 1] }],
        }),
      400,
      /has shape \[1,4\] but input_ids has \[1,5\]/,
    ],
    [
      "sequence too long",
      () => s.post(infer, { inputs: [{ ...ids5, shape: [1, 65], data: new Array(65).fill(3) }] }),
      400,
      /sequence length 65 exceeds this server's maximum of 64/,
    ],
    [
      "unknown output",
      () => s.post(infer, { inputs: [ids5], outputs: [{ name: "logits" }] }),
      400,
      /unknown output "logits"/,
    ],
    [
      "body too large",
      () => s.post(infer, { inputs: [ids5], pad: "x".repeat(5000) }),
      413,
      /exceeds the limit of 4096 bytes/,
    ],
    ["unknown model", () => s.post("/v2/models/bert/infer", { inputs: [ids5] }), 404, /unknown model 'bert'/],
    ["unknown version", () => s.get("/v2/models/qa/versions/7"), 404, /unknown model 'qa' version 7/],
    ["unknown path", () => s.get("/v3/whatever"), 404, /no such endpoint/],
    ["GET on infer", () => s.get(infer), 405, /GET is not allowed/],
    [
      "text endpoint of another head",
      () => s.post("/v1/classify", { text: "hi" }),
      404,
      /needs a BertForSequenceClassification/,
    ],
    [
      "QA without context",
      () => s.post("/v1/qa", { question: "who?" }),
      400,
      /needs both "question" and "context"/,
    ],
    [
      "QA with a number",
      () => s.post("/v1/qa", { question: 1, context: "x" }),
      400,
      /"question" must be a string/,
    ],
    [
      "QA with an extra field",
      () => s.post("/v1/qa", { question: "a", context: "b", top_k: 2 }),
      400,
      /unknown field 'top_k'/,
    ],
  ];
  try {
    for (const [what, send, status, message] of cases) {
      const r = await send();
      assert.equal(r.status, status, `${what}: ${r.text}`);
      assert.match(r.headers.get("content-type") ?? "", /application\/json/, what);
      const body = r.body as { error: string };
      assert.equal(Object.keys(body).join(), "error", what);
      assert.match(body.error, message, what);
      assert.ok(!body.error.includes("\n"), `${what}: one line`);
    }
    // After all that the server still answers.
    assert.equal((await s.post(infer, { inputs: [ids5] })).status, 200);
    assert.ok(!s.logs.some((l) => l.startsWith("error")), s.logs.join("\n"));
  } finally {
    await s.close();
  }
});

Deno.test("a full queue answers 503 at once, with Retry-After, and queued work still completes", async () => {
  // A long delay keeps the first two sequences waiting for batch-mates while the third arrives.
  const s = await serveForTest("qa", referenceBackend(), { maxBatch: 8, maxDelayMs: 400, maxQueue: 2 });
  try {
    const one = (n: number) =>
      s.post("/v2/models/qa/infer", { inputs: [{ ...ids5, data: [2, n, 6, 7, 8] }] });
    const waiting = [one(10), one(11)];
    await new Promise((r) => setTimeout(r, 100));
    const refused = await one(12);
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.headers.get("retry-after"), "1");
    assert.match((refused.body as { error: string }).error, /server busy/);
    for (const r of await Promise.all(waiting)) assert.equal(r.status, 200, r.text);
    // A request with more sequences than the queue can ever hold is refused as too large.
    const big = await s.post("/v2/models/qa/infer", {
      inputs: [{ ...ids5, shape: [3, 5], data: new Array(15).fill(4) }],
    });
    assert.equal(big.status, 413, big.text);
  } finally {
    await s.close();
  }
});

Deno.test("slow clients get 408 and a cap of their own; shutdown does not wait; long text is 413", async () => {
  const s = await serveForTest("qa", referenceBackend(), { bodyTimeoutMs: 300, maxInFlight: 3 });
  const half = async () => { // headers and part of a body, then nothing: a slow or malicious client
    const c = await Deno.connect({ hostname: "127.0.0.1", port: Number(new URL(s.url).port) });
    const head =
      "POST /v1/qa HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\ncontent-length: 99\r\n\r\n";
    await c.write(new TextEncoder().encode(`${head}{"quest`));
    return c;
  };
  const slow = await Promise.all([half(), half(), half()]);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal((await s.post("/v1/qa", { question: "who", context: "john" })).status, 503);
  assert.equal((await s.get("/v2/health/live")).status, 200, "health answers with the cap full");
  for (const c of slow) {
    const buf = new Uint8Array(256);
    assert.match(new TextDecoder().decode(buf.subarray(0, (await c.read(buf)) ?? 0)), /^HTTP\/1\.1 408/);
    c.close();
  }
  const long = await s.post("/v1/qa", { question: "who", context: "a ".repeat(60_000) });
  assert.equal(long.status, 413, long.text);
  const lingering = await half(), t0 = performance.now();
  await s.close(); // with a slow client connected: its body times out, so the drain ends
  assert.ok(performance.now() - t0 < 5000);
  lingering.close();
});

Deno.test("GET /metrics is Prometheus text counting requests, errors, batches and latencies", async () => {
  const s = await serveForTest("qa", referenceBackend());
  try {
    await s.post("/v2/models/qa/infer", { inputs: [ids5] });
    await s.post("/v2/models/qa/infer", {
      inputs: [{ ...ids5, shape: [2, 5], data: [...ids5.data, ...ids5.data] }],
    });
    await s.post("/v2/models/qa/infer", "nope");
    await s.post("/v1/qa", { question: "who?", context: "the fox did" });
    const m = await s.get("/metrics");
    assert.equal(m.status, 200);
    assert.match(m.headers.get("content-type")!, /^text\/plain; version=0\.0\.4/);
    const lines = m.text.trimEnd().split("\n");
    // Every line is a comment or `name{labels} value`.
    for (const l of lines) {
      assert.match(l, /^(# (HELP|TYPE) \w+ .+|\w+(\{(\w+="[^"]*",?)*\})? [-+0-9.eInf]+)$/, l);
    }
    const value = (sample: string) => {
      const line = lines.find((l) => l.startsWith(sample + " "));
      assert.ok(line, `no sample ${sample}`);
      return Number(line.slice(sample.length + 1));
    };
    assert.equal(value('bertfuse_requests_total{endpoint="infer",code="200"}'), 2);
    assert.equal(value('bertfuse_requests_total{endpoint="infer",code="400"}'), 1);
    assert.equal(value('bertfuse_request_errors_total{endpoint="infer",code="400"}'), 1);
    assert.equal(value('bertfuse_requests_total{endpoint="qa",code="200"}'), 1);
    // 1 + 2 + 1 sequences (the QA context fits one window); the histogram's count is the batches run.
    assert.equal(value("bertfuse_sequences_total"), 4);
    assert.equal(value("bertfuse_batch_size_count"), value("bertfuse_batch_compute_duration_seconds_count"));
    assert.equal(value("bertfuse_batch_size_sum"), 4);
    assert.equal(value("bertfuse_queue_duration_seconds_count"), 4);
    assert.equal(value("bertfuse_request_duration_seconds_count"), 4);
    assert.equal(value('bertfuse_request_duration_seconds_bucket{le="+Inf"}'), 4);
    assert.equal(value("bertfuse_queue_depth"), 0);
    assert.ok(lines.includes("# TYPE bertfuse_batch_size histogram"));
  } finally {
    await s.close();
  }
});
