/**
 * A bounded load test of `deno task serve` on loopback. For each backend, batching setting and head it
 * starts the server as its own process (HTTP and gRPC on port 0, so nothing else is disturbed), asks every
 * distinct request once on its own over KServe v2 JSON (the single-request answers), then for each
 * protocol, batch and concurrency sends a fixed number of requests from that many workers, stopping early
 * at the time limit, and checks every answer against the single-request one. It prints requests/s,
 * p50/p99 latency (client side: send to the decoded answer), errors and mismatches (an answer that
 * differs), the model's milliseconds per request (the server's batch compute time over the cell) and the
 * overhead: mean latency over that, less one (queue, encoding, transport), and ends the server with SIGTERM.
 *
 * Protocols: text (POST /v1/qa from text, QA head only), json (KServe v2 JSON), binary (Triton's binary
 * tensors both ways) and grpc (ModelInfer with raw contents). A KServe answer is reduced to its outputs'
 * float32 bytes, so binary and gRPC answers are checked against the JSON ones bit for bit. Heads: qa (the
 * checkpoint, default the tiny QA fixture) and mlm (a random BERT-Tiny pre-training checkpoint written to a
 * temporary folder: MLM logits 30,522 wide, where encoding the answer dominates).
 */
import { parseFlags, positiveInt, runMain, UsageError } from "../cli/common.ts";
import bertTiny from "../models/bert-tiny.ts";
import { defineBert } from "../models/bert.ts";
import { writeHfCheckpoint } from "../model_io/hf_checkpoint.ts";
import { initParams } from "../model_io/init_params.ts";
import { kserveClient } from "../serve/grpc.ts";
import { readyServer } from "./serve_ready.ts";

const ROOT = new URL("../", import.meta.url).pathname;

const HELP = `
deno task bench:serve [--checkpoint DIR] [--backends reference,webgpu] [--heads qa] [--concurrency 1,8,32]
                      [--batching on,off] [--protocols text] [--batch 1] [--requests 200] [--duration-s 20]
                      [--max-batch-size 8] [--max-delay-ms 5] [--json FILE]

  --checkpoint DIR     the qa head's checkpoint (default: the tiny random QA one, tests/fixtures/hf-tiny/qa)
  --backends L         backends to serve on, one server each (default reference,webgpu)
  --heads L            qa and/or mlm (a random BERT-Tiny pre-training checkpoint, 30,522-wide logits)
  --concurrency L      simultaneous requests (default 1,8,32)
  --batching L         on: --max-batch-size N; off: --max-batch-size 1 (default on,off)
  --protocols L        text (/v1/qa, qa head only), json, binary (Triton's binary tensors), grpc
  --batch L            sequences per KServe request (default 1); text requests are one question each
  --requests N         requests per cell (default 200)
  --duration-s T       a cell stops sending after T seconds even if requests remain (default 20)
  --json FILE          also write the rows as JSON
`;

const WORDS = ("the quick brown fox jumped over a lazy dog near river bank and then it ran home while " +
  "nobody saw where went after that but remembered for long time in old town by green hill").split(" ");
const QUESTIONS = [
  "where did the fox go?",
  "who saw the dog?",
  "what is near the river?",
  "when did it run?",
];
/** Tokens per KServe sequence: one bucket, so every batch size has its compiled plan. */
const SEQ = 16;

/** Deterministic requests: n questions over contexts of 8 to 67 words, or n batches of token ids. */
function payloads(protocol: string, batch: number, vocab: number, n = 16) {
  let seed = 12345;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  return Array.from({ length: n }, (_, i) => {
    if (protocol === "text") {
      const words = Array.from({ length: 8 + Math.floor(rand() * 60) }, () => WORDS[Math.floor(rand() * 23)]);
      return { question: QUESTIONS[i % QUESTIONS.length], context: words.join(" ") + "." };
    }
    return Array.from(
      { length: batch * SEQ },
      (_, k) => k % SEQ === 0 ? 2 : 1 + Math.floor(rand() * (vocab - 1)),
    );
  });
}

async function startServe(args: string[]) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${ROOT}cli/serve.ts`, "--port", "0", "--grpc-port", "0", ...args],
    cwd: ROOT,
    // The environment is inherited: DENO_WEBGPU_BACKEND and XDG_RUNTIME_DIR reach the server.
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const { out, stderr, drained: drainStdout } = await readyServer(child, `serve ${args.join(" ")}`);
  const [, url, grpcAddr] = out.match(/listening on (http:\/\/[^ ]+) and grpc ([^ ]+)/)!;
  // Logits of a batch of 8 are 15.6 MB: past grpc-js's 4 MB limit for what a client receives, and its 64 KiB
  // HTTP/2 window would stall the server on window updates (real clients grow theirs; batch 8: p50 -25%).
  const window = { "grpc-node.flow_control_window": 1 << 28 };
  const grpc = kserveClient(grpcAddr, { "grpc.max_receive_message_length": -1, ...window });
  return {
    url,
    grpc,
    async stop() {
      grpc.close();
      child.kill("SIGTERM");
      const { code } = await child.status;
      await Promise.all([drainStdout, stderr]);
      return code;
    },
  };
}

type Served = Awaited<ReturnType<typeof startServe>>;
/** The seconds the server's batches have spent on the backend so far (its /metrics). */
const computeSeconds = async (s: Served) =>
  Number(
    (await (await fetch(`${s.url}/metrics`)).text()).match(
      /^bertfuse_batch_compute_duration_seconds_sum (\S+)/m,
    )![1],
  );
const f32 = (data: number[]) => new Uint8Array(Float32Array.from(data).buffer);
const concat = async (parts: BlobPart[]) => new Uint8Array(await new Blob(parts).arrayBuffer());

/** One request by `protocol`; the answer as bytes (KServe: the outputs' float32 bytes, in order). */
async function send(s: Served, protocol: string, model: string, p: unknown): Promise<Uint8Array> {
  const shape = [Array.isArray(p) ? p.length / SEQ : 1, SEQ];
  const post = (path: string, body: BodyInit, headers: Record<string, string> = {}) =>
    fetch(s.url + path, { method: "POST", body, headers }).then(async (r) => {
      if (r.status !== 200) throw new Error(`${r.status}: ${await r.text()}`);
      return r;
    });
  if (protocol === "text") {
    return new TextEncoder().encode(await (await post("/v1/qa", JSON.stringify(p))).text());
  }
  if (protocol === "json") {
    const r = await post(
      `/v2/models/${model}/infer`,
      JSON.stringify({ inputs: [{ name: "input_ids", shape, datatype: "INT64", data: p }] }),
    );
    return concat((await r.json()).outputs.map((o: { data: number[] }) => f32(o.data)));
  }
  const raw = new Uint8Array(BigInt64Array.from((p as number[]).map(BigInt)).buffer);
  if (protocol === "grpc") {
    const r = await s.grpc.call("ModelInfer", {
      model_name: model,
      inputs: [{ name: "input_ids", datatype: "INT64", shape }],
      raw_input_contents: [raw],
    });
    return concat(r.raw_output_contents as BlobPart[]);
  }
  const header = JSON.stringify({
    inputs: [{
      name: "input_ids",
      shape,
      datatype: "INT64",
      parameters: { binary_data_size: raw.byteLength },
    }],
    parameters: { binary_data_output: true },
  });
  const r = await post(`/v2/models/${model}/infer`, new Blob([header, raw]), {
    "inference-header-content-length": String(header.length),
  });
  return new Uint8Array(await r.arrayBuffer()).subarray(
    Number(r.headers.get("inference-header-content-length")),
  );
}

const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);
const percentile = (sorted: number[], q: number) =>
  sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] : NaN;

async function cell(
  ask: (i: number) => Promise<Uint8Array>,
  expected: Uint8Array[],
  concurrency: number,
  total: number,
  limitMs: number,
) {
  let next = 0, errors = 0, mismatches = 0;
  const lat: number[] = [];
  const t0 = performance.now();
  const worker = async () => {
    while (next < total && performance.now() - t0 < limitMs) {
      const i = next++, t = performance.now();
      const got = await ask(i % expected.length).catch(() => undefined);
      lat.push(performance.now() - t);
      if (!got) errors++;
      else if (!same(got, expected[i % expected.length])) mismatches++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  const r = (x: number) => Math.round(x * 10) / 10;
  return {
    requests: lat.length,
    seconds: r(seconds),
    rps: r(lat.length / seconds),
    mean_ms: lat.reduce((a, x) => a + x, 0) / lat.length,
    p50_ms: r(percentile(lat, 0.5)),
    p99_ms: r(percentile(lat, 0.99)),
    errors,
    mismatches,
  };
}

/** A random BERT-Tiny pre-training checkpoint (64 positions) in a temporary folder. */
async function mlmCheckpoint(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-bench-mlm-" });
  const config = { ...bertTiny.config, max_position_embeddings: 64, architectures: ["BertForPreTraining"] };
  const g = defineBert("mlm", config).build({ head: "pretraining", mode: "infer", batchSize: 1, seqLen: 1 });
  await writeHfCheckpoint(dir, g, config, initParams(g, 1));
  return dir;
}

function list(flag: string, v: string | undefined, fallback: string, allowed?: string[]): string[] {
  const xs = (v ?? fallback).split(",").map((x) => x.trim()).filter(Boolean);
  if (!xs.length) throw new UsageError(`--${flag} needs at least one value`);
  const bad = xs.find((x) => allowed && !allowed.includes(x));
  if (bad) throw new UsageError(`--${flag} takes ${allowed!.join(", ")}, got '${bad}'`);
  return xs;
}

await runMain(async () => {
  const flags = "checkpoint backends heads concurrency batching protocols batch requests duration-s " +
    "max-batch-size max-delay-ms json";
  const options = Object.fromEntries(flags.split(" ").map((f) => [f, { type: "string" as const }]));
  const { values: v } = parseFlags(Deno.args, options, HELP);
  const ints = (flag: string, fallback: string) =>
    list(flag, v[flag], fallback).map((c) => positiveInt(flag, c, 1));
  const backends = list("backends", v.backends, "reference,webgpu");
  const heads = list("heads", v.heads, "qa", ["qa", "mlm"]);
  const protocols = list("protocols", v.protocols, "text", ["text", "json", "binary", "grpc"]);
  const [concurrency, batches] = [ints("concurrency", "1,8,32"), ints("batch", "1")];
  const batching = list("batching", v.batching, "on,off", ["on", "off"]);
  const total = positiveInt("requests", v.requests, 200);
  const limitMs = positiveInt("duration-s", v["duration-s"], 20) * 1000;
  const maxBatch = positiveInt("max-batch-size", v["max-batch-size"], 8);
  const delay = v["max-delay-ms"] ?? "5";
  const model = "served";
  console.log(
    `${total} requests per cell (at most ${
      limitMs / 1000
    } s); batching on = --max-batch-size ${maxBatch} --max-delay-ms ${delay}`,
  );
  console.log(
    "backend     batching head protocol batch  conc  requests   req/s   p50 ms   p99 ms  errors  mismatches" +
      "  model ms  overhead %",
  );
  const rows: Record<string, unknown>[] = [];
  for (const head of heads) {
    const checkpoint = head === "mlm"
      ? await mlmCheckpoint()
      : v.checkpoint ?? `${ROOT}tests/fixtures/hf-tiny/qa`;
    const vocab = JSON.parse(await Deno.readTextFile(`${checkpoint}/config.json`)).vocab_size;
    for (const backend of backends) {
      for (const b of batching) {
        const on = b === "on";
        const s = await startServe([
          ...["--checkpoint", checkpoint, "--model-name", model, "--backend", backend, "--max-queue", "1024"],
          ...["--max-batch-size", on ? String(maxBatch) : "1", "--max-delay-ms", on ? delay : "0"],
          ...(protocols.includes("text") ? [] : ["--buckets", String(SEQ)]),
        ]);
        try {
          for (const batch of batches) {
            const answers = new Map<string, { ps: unknown[]; expected: Uint8Array[] }>();
            for (const protocol of protocols) {
              if (protocol === "text" && (head !== "qa" || batch !== 1)) continue;
              // The single-request answers every concurrent answer must equal (KServe: the JSON ones).
              const kind = protocol === "text" ? "text" : "json";
              if (!answers.has(kind)) {
                const ps = payloads(kind, batch, vocab), expected: Uint8Array[] = [];
                for (const p of ps) expected.push(await send(s, kind, model, p));
                answers.set(kind, { ps, expected });
              }
              const { ps, expected } = answers.get(kind)!;
              for (const c of concurrency) {
                const before = await computeSeconds(s);
                const r = await cell((i) => send(s, protocol, model, ps[i]), expected, c, total, limitMs);
                // The model's share of a request, and what serving adds to it: queue, encoding, transport.
                const modelMs = (await computeSeconds(s) - before) * 1000 / r.requests;
                const overheadPct = Math.round((r.mean_ms / modelMs - 1) * 1000) / 10;
                const row = { backend, batching: b, head, protocol, batch, concurrency: c, ...r };
                rows.push({ ...row, modelMs, overheadPct });
                const one = (x: number) => x.toFixed(1);
                const cells = [batch, c, r.requests, one(r.rps), one(r.p50_ms), one(r.p99_ms), r.errors];
                const widths = [5, 5, 9, 7, 8, 8, 7, 11, 9, 10];
                const text = [...cells, r.mismatches, one(modelMs), overheadPct].map((x, k) =>
                  String(x).padStart(widths[k])
                );
                console.log(
                  [backend.padEnd(11), b.padEnd(8), head.padEnd(4), protocol.padEnd(8), ...text].join(" "),
                );
              }
            }
          }
        } finally {
          const code = await s.stop();
          if (code !== 0) console.error(`warning: the ${backend} server exited with ${code} on SIGTERM`);
        }
      }
    }
    if (head === "mlm") await Deno.remove(checkpoint, { recursive: true });
  }
  if (v.json) {
    const out = { bench: "serve", args: Deno.args, date: new Date().toISOString(), rows };
    await Deno.writeTextFile(v.json, JSON.stringify(out, null, 2) + "\n");
  }
  if (rows.some((r) => r.errors || r.mismatches)) {
    console.error("error: some answers failed or differed from the single-request run");
    Deno.exit(1);
  }
});
