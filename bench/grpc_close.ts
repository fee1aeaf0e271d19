/**
 * `deno task bench:grpc-close`: how often a client closing a gRPC channel with many calls in flight kills
 * `deno task serve` (Deno's node:http2 aborting in nghttp2, denoland/deno#36788; serve/grpc.ts bounds the
 * streams a connection may hold). Each try starts serve on the tiny QA fixture (reference backend, loopback),
 * sends --calls ModelInfer calls on one channel, closes it 300 ms later and checks the server 1.5 s on.
 */
import { intFlag, parseFlags, runMain } from "../cli/common.ts";
import { kserveClient } from "../serve/grpc.ts";
import { readyServer } from "./serve_ready.ts";

const HELP = `
deno task bench:grpc-close [--calls 300] [--tries 8]

  --calls N   calls in flight on the channel when the client closes it (default 300, at most 5000)
  --tries N   servers started, one try each (default 8, at most 50)
`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ROW = {
  name: "input_ids",
  datatype: "INT64",
  shape: [1, 5],
  contents: { int64_contents: [2, 5, 6, 7, 8] },
};

async function tryOnce(calls: number): Promise<Deno.CommandStatus | undefined> {
  const args = [
    "run",
    "-A",
    "cli/serve.ts",
    "--checkpoint",
    "tests/fixtures/hf-tiny/qa",
    "--backend",
    "reference",
  ];
  const child = new Deno.Command(Deno.execPath(), {
    args: [...args, "--port", "0", "--grpc-port", "0"],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const { out } = await readyServer(child, "deno task serve");
  const client = kserveClient(out.match(/grpc (127\.0\.0\.1:\d+)/)![1]);
  const infer = () => client.call("ModelInfer", { model_name: "qa", inputs: [ROW] }).catch(() => {});
  const pending = Array.from({ length: calls }, infer);
  await sleep(300);
  client.close();
  await Promise.race([Promise.all(pending), sleep(3000)]);
  await sleep(1500);
  const status = await Promise.race([child.status, sleep(200).then(() => undefined)]);
  if (status) return status;
  child.kill("SIGKILL");
  await child.status;
}

if (import.meta.main) {
  await runMain(async () => {
    const { values: v } = parseFlags(
      Deno.args,
      { calls: { type: "string" }, tries: { type: "string" } },
      HELP,
    );
    const calls = intFlag("calls", v.calls, 300, { min: 1, max: 5000 });
    const tries = intFlag("tries", v.tries, 8, { min: 1, max: 50 });
    let died = 0;
    for (let t = 1; t <= tries; t++) {
      const s = await tryOnce(calls);
      if (s) died++;
      console.log(
        `try ${t}: ${s ? `serve died (exit ${s.code}, ${s.signal ?? "no signal"})` : "serve alive"}`,
      );
    }
    console.log(`${calls} calls in flight, then the channel closed: serve died in ${died} of ${tries} tries`);
  });
}
