/**
 * `deno task serve` as a process: it prints its address, answers, and on SIGTERM answers what is in
 * flight and exits 0; bad flags, a taken port and a backend that cannot start are one line and exit 1.
 */
import assert from "node:assert/strict";
import { cliEnv, ROOT, runCli } from "../util/cli.ts";
import { testCpu } from "../util/cpu_check.ts";

const dec = new TextDecoder();
const FIXTURE_QA = `${ROOT}tests/fixtures/hf-tiny/qa`;

/** Spawns `deno task serve ARGS`, waits for its "ready" line, and returns the base URL and the process. */
async function spawnServe(args: string[], env: Record<string, string> = {}) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "serve", ...args],
    cwd: ROOT,
    env: { ...cliEnv(), ...env },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const reader = child.stdout.getReader();
  let out = "";
  while (!/^ready: /m.test(out)) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`serve exited before ready:\n${out}`);
    out += dec.decode(value);
  }
  const url = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/)![1];
  const rest = (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return out;
      out += dec.decode(value);
    }
  })();
  const stderr = new Response(child.stderr).text();
  return { child, url, grpc: out.match(/ and grpc ([\d.:]+) /)?.[1], stdout: rest, stderr };
}

Deno.test("SIGTERM answers every request in flight, REST and gRPC, then exits 0", async () => {
  // A long batching delay keeps the requests queued when the signal arrives.
  const s = await spawnServe("--backend reference --port 0 --grpc-port 0 --max-delay-ms 1500".split(" "));
  const ids = { name: "input_ids", datatype: "INT32", shape: [1, 3], contents: { int_contents: [2, 5, 9] } };
  const request = JSON.stringify({ model_name: "qa", inputs: [ids] });
  // The gRPC client is Node's (why: tests/util/grpc_node_client.mjs), in flight once it says "connected".
  const node = new Deno.Command("node", {
    args: [`${ROOT}tests/util/grpc_node_client.mjs`, s.grpc!, request],
    stdout: "piped",
  }).spawn();
  const nodeOut = node.stdout.pipeThrough(new TextDecoderStream()).values();
  let grpcOut = "";
  while (!grpcOut.startsWith("connected\n")) grpcOut += (await nodeOut.next()).value ?? assert.fail(grpcOut);
  const ask = (n: number) =>
    fetch(`${s.url}/v2/models/qa/infer`, {
      method: "POST",
      body: JSON.stringify({
        inputs: [{ name: "input_ids", shape: [1, 4], datatype: "INT64", data: [2, n, 7, 9] }],
      }),
    });
  const inFlight = [ask(10), ask(20), ask(30)];
  await new Promise((r) => setTimeout(r, 400));
  s.child.kill("SIGTERM");
  const answers = await Promise.all(inFlight);
  for await (const chunk of nodeOut) grpcOut += chunk;
  assert.deepEqual(JSON.parse(grpcOut.split("\n")[1]), { raw_output_bytes: [12, 12] });
  assert.equal((await node.status).code, 0);
  for (const r of answers) assert.deepEqual([r.status, (await r.json()).outputs?.[0].shape], [200, [1, 4]]);
  const [{ code }, stdout, stderr] = await Promise.all([s.child.status, s.stdout, s.stderr]);
  assert.equal(code, 0, stderr);
  assert.match(stderr, /draining: finishing requests in flight/);
  assert.match(stdout, /^stopped$/m);
  // After the drain nothing listens any more.
  await assert.rejects(fetch(`${s.url}/v2/health/live`));
});

Deno.test("a taken port, a bad flag and another host are one line and exit 1", async () => {
  const s = await spawnServe(["--backend", "reference", "--port", "0", "--buckets", "16"]);
  try {
    const port = new URL(s.url).port;
    const perms = ["--allow-read", "--allow-env", "--allow-net=127.0.0.1"];
    const cases: [string[], RegExp][] = [
      [
        ["--backend", "reference", "--port", port],
        new RegExp(`^error: cannot listen on 127\\.0\\.0\\.1:${port}: `),
      ],
      [["--port", "70000"], /^error: --port must be an integer from 0 to 65535/],
      [["--backend", "cpu", "--port", "0"], /^error: --backend cpu: /],
      [["--max-delay-ms", "soon"], /^error: --max-delay-ms must be a number >= 0, got 'soon'/],
      [["--buckets", "16,x"], /^error: --buckets must be comma-separated positive integers/],
      [["--checkpoint", "/nonexistent"], /^error: --checkpoint \/nonexistent: no such folder/],
      [["--max-batch-size", "999"], /^error: --max-batch-size must be an integer from 1 to 256, got '999'/],
      [["--top-k", "5000"], /^error: --top-k must be an integer from 1 to 100, got '5000'/],
      // A training checkpoint's manifest is verified, as infer and train do: here one that lists nothing.
      [["--checkpoint", await manifested()], /^error: .*manifest\.json/],
      [
        ["--backend", "reference", "--host", "0.0.0.0", "--port", "0"],
        /^error: cannot listen on 0\.0\.0\.0:0: deno task serve may bind 127\.0\.0\.1 only/,
      ],
    ];
    for (const [args, message] of cases) {
      const r = await runCli("serve.ts", args, perms);
      assert.equal(r.code, 1, `${args.join(" ")}: ${r.stderr}`);
      const errors = r.stderr.trim().split("\n").filter((l) => l.startsWith("error"));
      assert.equal(errors.length, 1, r.stderr);
      assert.match(errors[0], message);
      assert.ok(!r.stderr.includes("    at "), `no stack trace: ${r.stderr}`);
    }
    const help = await runCli("serve.ts", ["--help"], perms);
    assert.equal(help.code, 0);
    const flags = ["--checkpoint", "--port", "--host", "--max-batch-size", "--max-delay-ms", "--max-queue"];
    for (const flag of flags) assert.ok(help.stdout.includes(flag), flag);
    assert.match(help.stdout, /else webgpu on\s+a real GPU adapter, else cpu when there is a C compiler/);
  } finally {
    s.child.kill("SIGTERM");
    assert.equal((await s.child.status).code, 0);
    await s.stdout;
    await s.stderr;
  }
});

const cpu = await testCpu(), xdg = Deno.env.get("XDG_CACHE_HOME");
if (cpu.ctx && xdg) console.log("serve task test ignored: XDG_CACHE_HOME moves the cache the task may write");
Deno.test({
  name: "deno task serve with no flags: auto's choice builds its kernels under the task's permissions",
  ignore: !cpu.ctx || !!xdg,
  fn: async () => {
    // BERTFUSE_CACHE blank: the CPU kernels go to ~/.cache/bertfuse/cpu, which the task may write.
    const s = await spawnServe("--port 0 --max-batch-size 2 --buckets 16".split(" "), { BERTFUSE_CACHE: "" });
    assert.deepEqual(await (await fetch(`${s.url}/v2/health/ready`)).json(), { ready: true });
    const qa = { question: "who jumped?", context: "The quick brown fox jumped over the lazy dog." };
    const body = await (await fetch(`${s.url}/v1/qa`, { method: "POST", body: JSON.stringify(qa) })).json();
    assert.equal(typeof body.answer, "string", JSON.stringify(body));
    s.child.kill("SIGTERM");
    const [{ code }, stderr] = await Promise.all([s.child.status, s.stderr, s.stdout]);
    assert.equal(code, 0, stderr);
    // The CPU backend runs here, so auto must not fall through to the reference interpreter.
    assert.match(stderr, /^backend: (cpu|webgpu|cuda) \(auto: /m);
  },
});

/** The tiny QA fixture with a manifest of our training checkpoints' format that does not describe it. */
async function manifested(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-serve-" }), from = FIXTURE_QA;
  for (const { name } of Deno.readDirSync(from)) await Deno.copyFile(`${from}/${name}`, `${dir}/${name}`);
  await Deno.writeTextFile(
    `${dir}/manifest.json`,
    JSON.stringify({ format: "bertfuse-training-checkpoint" }),
  );
  return dir;
}
