/**
 * A bounded load test of `deno task serve` on loopback. For each backend and batching setting it starts
 * the server as its own process (port 0, so nothing else is disturbed), asks every distinct request once
 * on its own (the single-request answers), then for each concurrency sends a fixed number of requests
 * from that many workers, stopping early at the time limit, and checks every answer against the
 * single-request one. It prints requests/s, p50/p99 latency (client side: send to last body byte),
 * errors (non-200) and mismatches (a 200 whose answer differs), and ends the server with SIGTERM.
 *
 * Requests are BERT QA from text (/v1/qa) by default, or KServe v2 token-id inference (--endpoint kserve).
 */
import { parseFlags, positiveInt, runMain, UsageError } from "../cli/common.ts";

const ROOT = new URL("../", import.meta.url).pathname;

const HELP = `
deno task bench:serve [--checkpoint DIR] [--backends reference,webgpu] [--concurrency 1,8,32]
                      [--batching on,off] [--requests 200] [--duration-s 20] [--endpoint qa|kserve]
                      [--max-batch-size 8] [--max-delay-ms 5] [--json FILE]

  --checkpoint DIR     default: the tiny random QA checkpoint (tests/fixtures/hf-tiny/qa)
  --backends L         backends to serve on, one server each (default reference,webgpu)
  --concurrency L      simultaneous requests (default 1,8,32)
  --batching L         on: --max-batch-size N; off: --max-batch-size 1 (default on,off)
  --requests N         requests per (backend, batching, concurrency) cell (default 200)
  --duration-s T       a cell stops sending after T seconds even if requests remain (default 20)
  --endpoint E         qa: POST /v1/qa with text; kserve: POST /v2/models/NAME/infer with token ids
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

/** Distinct requests of varied length (some contexts need several doc-stride windows), deterministic. */
function payloads(endpoint: string, model: string, n = 16): { path: string; body: string }[] {
  let seed = 12345;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  return Array.from({ length: n }, (_, i) => {
    const len = 8 + Math.floor(rand() * 60);
    const words = Array.from({ length: len }, () => WORDS[Math.floor(rand() * WORDS.length)]);
    if (endpoint === "qa") {
      return {
        path: "/v1/qa",
        body: JSON.stringify({ question: QUESTIONS[i % QUESTIONS.length], context: words.join(" ") + "." }),
      };
    }
    const s = Math.min(len, 60);
    const ids = Array.from({ length: s }, (_, k) => (k === 0 ? 2 : 1 + Math.floor(rand() * 98)));
    return {
      path: `/v2/models/${model}/infer`,
      body: JSON.stringify({ inputs: [{ name: "input_ids", shape: [1, s], datatype: "INT64", data: ids }] }),
    };
  });
}

interface Server {
  url: string;
  child: Deno.ChildProcess;
  stop(): Promise<number>;
}

async function startServe(args: string[]): Promise<Server> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-read",
      "--allow-env",
      "--allow-ffi",
      "--allow-net=127.0.0.1",
      `${ROOT}cli/serve.ts`,
      ...args,
    ],
    cwd: ROOT,
    // The environment is inherited: DENO_WEBGPU_BACKEND and XDG_RUNTIME_DIR reach the server.
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  const reader = child.stdout.getReader();
  const dec = new TextDecoder();
  let out = "";
  while (!/^ready: /m.test(out)) {
    const { done, value } = await reader.read();
    if (done) throw new UsageError(`serve ${args.join(" ")} exited before ready: ${(await stderr).trim()}`);
    out += dec.decode(value);
  }
  const drainStdout = (async () => {
    while (!(await reader.read()).done) { /* keep the pipe flowing */ }
  })();
  return {
    url: out.match(/listening on (http:\/\/[^ ]+)/)![1],
    child,
    async stop() {
      child.kill("SIGTERM");
      const { code } = await child.status;
      await drainStdout;
      await stderr;
      return code;
    },
  };
}

async function ask(
  url: string,
  p: { path: string; body: string },
): Promise<{ status: number; text: string; ms: number }> {
  const t0 = performance.now();
  try {
    const r = await fetch(url + p.path, {
      method: "POST",
      body: p.body,
      headers: { "content-type": "application/json" },
    });
    const text = await r.text();
    return { status: r.status, text, ms: performance.now() - t0 };
  } catch (e) {
    return { status: 0, text: String(e), ms: performance.now() - t0 };
  }
}

const percentile = (sorted: number[], q: number) =>
  sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] : NaN;

interface Row {
  backend: string;
  batching: string;
  concurrency: number;
  requests: number;
  seconds: number;
  rps: number;
  p50_ms: number;
  p99_ms: number;
  errors: number;
  mismatches: number;
}

async function cell(
  url: string,
  ps: { path: string; body: string }[],
  expected: string[],
  concurrency: number,
  total: number,
  limitMs: number,
) {
  let next = 0, errors = 0, mismatches = 0;
  const lat: number[] = [];
  const t0 = performance.now();
  const worker = async () => {
    while (next < total && performance.now() - t0 < limitMs) {
      const i = next++;
      const r = await ask(url, ps[i % ps.length]);
      lat.push(r.ms);
      if (r.status !== 200) errors++;
      else if (r.text !== expected[i % ps.length]) mismatches++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  return {
    requests: lat.length,
    seconds,
    p50: percentile(lat, 0.5),
    p99: percentile(lat, 0.99),
    errors,
    mismatches,
  };
}

function list(flag: string, v: string | undefined, fallback: string): string[] {
  const xs = (v ?? fallback).split(",").map((x) => x.trim()).filter(Boolean);
  if (!xs.length) throw new UsageError(`--${flag} needs at least one value`);
  return xs;
}

await runMain(async () => {
  const { values } = parseFlags(Deno.args, {
    checkpoint: { type: "string" },
    backends: { type: "string" },
    concurrency: { type: "string" },
    batching: { type: "string" },
    requests: { type: "string" },
    "duration-s": { type: "string" },
    endpoint: { type: "string" },
    "max-batch-size": { type: "string" },
    "max-delay-ms": { type: "string" },
    json: { type: "string" },
  }, HELP);
  const checkpoint = values.checkpoint ?? `${ROOT}tests/fixtures/hf-tiny/qa`;
  const backends = list("backends", values.backends, "reference,webgpu");
  const concurrency = list("concurrency", values.concurrency, "1,8,32").map((c) =>
    positiveInt("concurrency", c, 1)
  );
  const batching = list("batching", values.batching, "on,off");
  if (batching.some((b) => b !== "on" && b !== "off")) throw new UsageError("--batching takes on and/or off");
  const total = positiveInt("requests", values.requests, 200);
  const limitMs = positiveInt("duration-s", values["duration-s"], 20) * 1000;
  const endpoint = values.endpoint ?? "qa";
  if (endpoint !== "qa" && endpoint !== "kserve") throw new UsageError("--endpoint must be qa or kserve");
  const maxBatch = positiveInt("max-batch-size", values["max-batch-size"], 8);
  const delay = values["max-delay-ms"] ?? "5";
  const model = "served";
  const ps = payloads(endpoint, model);

  const rows: Row[] = [];
  console.log(
    `${endpoint === "qa" ? "POST /v1/qa" : "KServe v2 infer"} on ${checkpoint}; ${total} requests per cell ` +
      `(at most ${
        limitMs / 1000
      } s), ${ps.length} distinct requests; batching on = --max-batch-size ${maxBatch} ` +
      `--max-delay-ms ${delay}`,
  );
  console.log("backend     batching  conc  requests   req/s   p50 ms   p99 ms  errors  mismatches");
  for (const backend of backends) {
    for (const b of batching) {
      const server = await startServe([
        "--checkpoint",
        checkpoint,
        "--model-name",
        model,
        "--backend",
        backend,
        "--port",
        "0",
        "--max-batch-size",
        b === "on" ? String(maxBatch) : "1",
        "--max-delay-ms",
        b === "on" ? delay : "0",
        "--max-queue",
        "1024",
      ]);
      try {
        // The single-request answers every concurrent answer must equal.
        const expected: string[] = [];
        for (const p of ps) {
          const r = await ask(server.url, p);
          if (r.status !== 200) {
            throw new UsageError(`${backend}: a single request failed (${r.status}): ${r.text}`);
          }
          expected.push(r.text);
        }
        for (const c of concurrency) {
          const r = await cell(server.url, ps, expected, c, total, limitMs);
          const row: Row = {
            backend,
            batching: b,
            concurrency: c,
            requests: r.requests,
            seconds: r.seconds,
            rps: r.requests / r.seconds,
            p50_ms: r.p50,
            p99_ms: r.p99,
            errors: r.errors,
            mismatches: r.mismatches,
          };
          rows.push(row);
          console.log(
            `${backend.padEnd(11)} ${b.padEnd(8)} ${String(c).padStart(5)} ${
              String(r.requests).padStart(9)
            } ` +
              `${row.rps.toFixed(1).padStart(7)} ${r.p50.toFixed(1).padStart(8)} ${
                r.p99.toFixed(1).padStart(8)
              } ` +
              `${String(r.errors).padStart(7)} ${String(r.mismatches).padStart(11)}`,
          );
        }
      } finally {
        const code = await server.stop();
        if (code !== 0) console.error(`warning: the ${backend} server exited with ${code} on SIGTERM`);
      }
    }
  }
  if (values.json) {
    await Deno.writeTextFile(
      values.json,
      JSON.stringify(
        { bench: "serve", endpoint, checkpoint, date: new Date().toISOString(), rows },
        null,
        2,
      ) + "\n",
    );
  }
  if (rows.some((r) => r.errors || r.mismatches)) {
    console.error("error: some answers failed or differed from the single-request run");
    Deno.exit(1);
  }
});
