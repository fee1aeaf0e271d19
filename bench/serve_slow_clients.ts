/**
 * Slow clients against `deno task serve` (issue 28). It starts the task on the reference backend and opens
 * N loopback connections, in turn: request headers sent a line a second and never ended, a body begun and
 * sent a byte a second, and one answer then nothing (idle keep-alive). It holds them while asking
 * /v2/health/ready every 250 ms, closes them, waits, opens N more and sends SIGTERM with those connected.
 * It prints the server's RSS (VmRSS of its process) at start, at its peak (VmHWM), after the clients closed
 * and with the second N connected, the health answers, and seconds from SIGTERM to exit (killed after 30).
 * tests/cpu/serve_slow_clients.test.ts runs `slowClientsLoad` with fewer clients.
 */
import { parseFlags, positiveInt, runMain } from "../cli/common.ts";
import { readyServer } from "./serve_ready.ts";

const HELP = `
deno task bench:serve-slow [--clients 2000] [--hold-s 15] [--settle-s 5] [--timeout-ms 10000]

  --clients N     slow connections at once, a third of each kind (default 2000)
  --hold-s T      how long they stay connected (default 15)
  --settle-s T    wait after they close before reading RSS (default 5)
  --timeout-ms N  the server's --body-timeout-ms (default 10000)
`;

/** A shell command's output: Deno reads /proc/PID only with every permission, `cat` needs none of ours. */
const sh = async (cmd: string) =>
  new TextDecoder().decode((await new Deno.Command("sh", { args: ["-c", cmd] }).output()).stdout);
/** VmRSS (now) or VmHWM (the peak) of process `pid`, in MB. */
const procMb = async (pid: number, field: string) =>
  Number((await sh(`cat /proc/${pid}/status`)).match(new RegExp(`${field}:\\s+(\\d+)`))![1]) / 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const HEADS = [
  "POST /v1/qa HTTP/1.1\r\nhost: a\r\n",
  'POST /v1/qa HTTP/1.1\r\nhost: a\r\ncontent-length: 99\r\n\r\n{"q',
  "GET /v2/health/live HTTP/1.1\r\nhost: a\r\n\r\n",
];

/** A client of kind 0 (slow headers), 1 (slow body) or 2 (idle); `cut` once the server closed it. */
async function slowClient(port: number, kind: number) {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const c = { cut: false, conn, reading: Promise.resolve(), dribble: () => {} };
  const write = (s: string) => conn.write(new TextEncoder().encode(s)).catch(() => c.cut = true);
  await write(HEADS[kind]);
  c.reading = (async () => {
    const buf = new Uint8Array(4096);
    while ((await conn.read(buf).catch(() => null)) !== null) { /* answers are not kept */ }
    c.cut = true;
  })();
  c.dribble = () => void (!c.cut && kind < 2 && write(kind ? "u" : "x-slow: 1\r\n"));
  return c;
}
type Client = Awaited<ReturnType<typeof slowClient>>;

/** `n` clients of `kinds` in turn, 100 at a time (the listen backlog is 511). */
async function openClients(port: number, n: number, kinds: number[]): Promise<Client[]> {
  const out: Client[] = [];
  for (let i = 0; i < n; i += 100) {
    const k = Array.from({ length: Math.min(100, n - i) }, (_, j) => kinds[(i + j) % kinds.length]);
    out.push(...await Promise.all(k.map((kind) => slowClient(port, kind))));
  }
  return out;
}

/** Closes the clients; how many the server had closed before. */
async function closeAll(clients: Client[]): Promise<number> {
  const cut = clients.filter((c) => c.cut).length;
  for (const c of clients) if (!c.cut) c.conn.close();
  await Promise.all(clients.map((c) => c.reading));
  return cut;
}

export async function slowClientsLoad(
  o: { clients: number; holdS: number; settleS: number; timeoutMs: number; kinds?: number[] },
) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "serve", "--backend", "reference", "--port", "0"]
      .concat("--body-timeout-ms", `${o.timeoutMs}`),
    cwd: new URL("../", import.meta.url).pathname,
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const { out, stderr, drained: stdout } = await readyServer(child, "serve");
  const url = out.match(/listening on (http:\/\/[^ ]+)/)![1], port = Number(new URL(url).port);
  // `deno task` runs the server as its child.
  const pid = Number((await sh(`cat /proc/${child.pid}/task/*/children`)).trim().split(" ")[0]);
  const rssStartMb = await procMb(pid, "VmRSS"), kinds = o.kinds ?? [0, 1, 2];

  const health = { ok: 0, asked: 0, maxMs: 0 };
  const clients = await openClients(port, o.clients, kinds);
  const tick = setInterval(() => clients.forEach((c) => c.dribble()), 1000);
  for (const t0 = performance.now(); performance.now() - t0 < o.holdS * 1000; await sleep(250)) {
    const t = performance.now();
    health.asked++;
    const r = await fetch(`${url}/v2/health/ready`, { signal: AbortSignal.timeout(5000) }).catch(() => null);
    if (r?.status === 200) health.ok++;
    await r?.body?.cancel();
    health.maxMs = Math.max(health.maxMs, performance.now() - t);
  }
  clearInterval(tick);
  const cutByServer = await closeAll(clients);
  await sleep(o.settleS * 1000);
  const rssAfterMb = await procMb(pid, "VmRSS"), rssPeakMb = await procMb(pid, "VmHWM");

  // SIGTERM with slow clients connected: the drain must not wait for them.
  const again = await openClients(port, o.clients, kinds);
  await sleep(1000);
  const rssAgainMb = await procMb(pid, "VmRSS"), t = performance.now();
  child.kill("SIGTERM");
  // The server first: killing `deno task` alone would leave it running.
  const kill = setTimeout(() =>
    [pid, child.pid].forEach((p) => {
      try {
        Deno.kill(p, "SIGKILL");
      } catch { /* already gone */ }
    }), 30_000);
  const { code } = await child.status;
  clearTimeout(kill);
  const sigtermToExitS = (performance.now() - t) / 1000;
  await Promise.all([closeAll(again), stdout]);
  return {
    rssStartMb,
    rssPeakMb,
    rssAfterMb,
    rssAgainMb,
    cutByServer,
    health,
    sigtermToExitS,
    code,
    stderr: await stderr,
  };
}

if (import.meta.main) {
  await runMain(async () => {
    const { values: v } = parseFlags(Deno.args, {
      clients: { type: "string" },
      "hold-s": { type: "string" },
      "settle-s": { type: "string" },
      "timeout-ms": { type: "string" },
    }, HELP);
    const clients = positiveInt("clients", v.clients, 2000);
    const f = await slowClientsLoad({
      clients,
      holdS: positiveInt("hold-s", v["hold-s"], 15),
      settleS: positiveInt("settle-s", v["settle-s"], 5),
      timeoutMs: positiveInt("timeout-ms", v["timeout-ms"], 10_000),
    });
    const mb = (x: number) => `${x.toFixed(0)} MB`;
    console.log(
      `${clients} slow clients (headers, body, idle), ${f.cutByServer} closed by the server while held\n` +
        `RSS: start ${mb(f.rssStartMb)}, peak ${mb(f.rssPeakMb)}, after they closed ${mb(f.rssAfterMb)} ` +
        `(+${mb(f.rssAfterMb - f.rssStartMb)}), with ${clients} again ${mb(f.rssAgainMb)}\n` +
        `/v2/health/ready under load: ${f.health.ok} of ${f.health.asked} answered 200, slowest ` +
        `${
          f.health.maxMs.toFixed(0)
        } ms\nSIGTERM with ${clients} slow clients connected: exit ${f.code} after ` +
        `${f.sigtermToExitS.toFixed(2)} s`,
    );
  });
}
