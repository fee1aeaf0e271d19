/**
 * A small Chrome DevTools Protocol client for the browser tests: starts headless Chromium on loopback with
 * a fresh profile, attaches to its page over the WebSocket the browser prints, and sends commands
 * (Page.navigate, Runtime.evaluate, Page.captureScreenshot). Only what the tests use; no dependencies.
 */

/** Flags every launch uses: headless WebGPU, and nothing that reaches Google's hosts. */
const CHROMIUM_FLAGS = [
  "--headless=new",
  "--no-sandbox",
  "--enable-unsafe-webgpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-quic",
  "--disable-default-apps",
  "--disable-extensions",
  "--remote-debugging-address=127.0.0.1",
  "--remote-debugging-port=0",
];

const CANDIDATES = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"];

/** The Chromium binary ($CHROMIUM, else Debian's), or why there is none. */
export function findChromium(): { path: string } | { missing: string } {
  const env = Deno.env.get("CHROMIUM");
  for (const path of env ? [env] : CANDIDATES) {
    try {
      if (Deno.statSync(path).isFile) return { path };
    } catch { /* try the next one */ }
  }
  return {
    missing: env
      ? `CHROMIUM=${env} does not exist`
      : `no Chromium at ${CANDIDATES.join(", ")} (apt-get install chromium, or set CHROMIUM)`,
  };
}

type Handler = (params: Record<string, unknown>) => void;

/** One DevTools WebSocket: numbered commands with their replies, and events by method name. */
export class CdpConnection {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly handlers = new Map<string, Set<Handler>>();
  private closedWith: Error | undefined;

  private constructor(private readonly ws: WebSocket) {
    ws.onmessage = (ev) => {
      const msg = JSON.parse(String(ev.data));
      if (typeof msg.id === "number") {
        const p = this.pending.get(msg.id);
        this.pending.delete(msg.id);
        if (msg.error) p?.reject(new Error(`CDP ${msg.error.message} (${msg.error.code})`));
        else p?.resolve(msg.result);
      } else if (typeof msg.method === "string") {
        for (const h of this.handlers.get(msg.method) ?? []) h(msg.params ?? {});
      }
    };
    ws.onclose = () => {
      this.closedWith = new Error("the DevTools connection closed");
      for (const p of this.pending.values()) p.reject(this.closedWith);
      this.pending.clear();
    };
  }

  static open(url: string): Promise<CdpConnection> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      ws.onopen = () => resolve(new CdpConnection(ws));
      ws.onerror = (e) => reject(new Error(`cannot open ${url}: ${(e as ErrorEvent).message ?? e}`));
    });
  }

  send<T = Record<string, unknown>>(method: string, params: Record<string, unknown> = {}): Promise<T> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  on(method: string, handler: Handler): () => void {
    let set = this.handlers.get(method);
    if (!set) this.handlers.set(method, set = new Set());
    set.add(handler);
    return () => set!.delete(handler);
  }

  /**
   * Evaluates `expression` in the page (awaiting a promise) and returns its value as JSON. A thrown
   * exception becomes an Error with the page's message and stack.
   */
  async evaluate<T>(expression: string, timeoutMs = 60_000): Promise<T> {
    const r = await this.send<{
      result: { value?: T };
      exceptionDetails?: { text: string; exception?: { description?: string } };
    }>("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true, timeout: timeoutMs });
    if (r.exceptionDetails) {
      const d = r.exceptionDetails;
      throw new Error(`in the page: ${d.exception?.description ?? d.text}`);
    }
    return r.result.value as T;
  }

  close(): void {
    try {
      this.ws.close();
    } catch { /* already closed */ }
  }
}

export interface Browser {
  /** The first page's connection (about:blank until navigated). */
  readonly page: CdpConnection;
  /** Console messages and uncaught exceptions of the page, oldest first (for failure messages). */
  readonly console: string[];
  close(): Promise<void>;
}

/** Reads stderr until Chromium prints its DevTools address; keeps reading (and the last lines) after. */
async function devtoolsAddress(stderr: ReadableStream<Uint8Array>, tail: string[]): Promise<string> {
  const lines = stderr.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  while (true) {
    const { value, done } = await lines.read();
    if (done) throw new Error(`Chromium exited before DevTools listened:\n${tail.join("\n")}`);
    buf += decoder.decode(value, { stream: true });
    const parts = buf.split("\n");
    buf = parts.pop()!;
    for (const line of parts) {
      tail.push(line);
      if (tail.length > 40) tail.shift();
      const m = /DevTools listening on (ws:\/\/\S+)/.exec(line);
      if (m) {
        // Drain the rest so a chatty browser never blocks on a full pipe.
        (async () => {
          while (!(await lines.read().catch(() => ({ done: true }))).done) { /* discard */ }
        })();
        return m[1];
      }
    }
  }
}

/** Starts headless Chromium with a temporary profile and connects to its page. */
export async function launchChromium(
  opts: { path?: string; extraFlags?: string[]; timeoutMs?: number } = {},
): Promise<Browser> {
  const found = opts.path ? { path: opts.path } : findChromium();
  if ("missing" in found) throw new Error(found.missing);
  const profile = await Deno.makeTempDir({ prefix: "bertfuse-chromium-" });
  const child = new Deno.Command(found.path, {
    args: [...CHROMIUM_FLAGS, `--user-data-dir=${profile}`, ...(opts.extraFlags ?? []), "about:blank"],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const tail: string[] = [];
  const cleanup = async () => {
    try {
      child.kill("SIGKILL");
    } catch { /* already gone */ }
    await child.status;
    await Deno.remove(profile, { recursive: true }).catch(() => {});
  };
  try {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const wsUrl = await Promise.race([
      devtoolsAddress(child.stderr, tail),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`Chromium did not start in time:\n${tail.join("\n")}`)),
          opts.timeoutMs ?? 30_000,
        );
      }),
    ]).finally(() => clearTimeout(timer));
    const port = new URL(wsUrl).port;
    const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json() as {
      type: string;
      webSocketDebuggerUrl: string;
    }[];
    const pageTarget = targets.find((t) => t.type === "page");
    if (!pageTarget) throw new Error("Chromium has no page target");
    const page = await CdpConnection.open(pageTarget.webSocketDebuggerUrl);
    const messages: string[] = [];
    page.on("Runtime.consoleAPICalled", (p) => {
      const args = (p.args as { value?: unknown; description?: string }[]) ?? [];
      messages.push(`${p.type}: ${args.map((a) => a.value ?? a.description ?? "").join(" ")}`);
    });
    page.on("Runtime.exceptionThrown", (p) => {
      const d = p.exceptionDetails as { text: string; exception?: { description?: string } };
      messages.push(`exception: ${d.exception?.description ?? d.text}`);
    });
    await page.send("Runtime.enable");
    await page.send("Page.enable");
    return {
      page,
      console: messages,
      async close() {
        page.close();
        await cleanup();
      },
    };
  } catch (e) {
    await cleanup();
    throw e;
  }
}

/** Navigates and resolves when the page's load event fires. */
export async function navigate(page: CdpConnection, url: string, timeoutMs = 30_000): Promise<void> {
  let off = () => {};
  let timer: ReturnType<typeof setTimeout> | undefined;
  const loaded = new Promise<void>((resolve, reject) => {
    off = page.on("Page.loadEventFired", () => resolve());
    timer = setTimeout(() => reject(new Error(`${url} did not load in ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    const r = await page.send<{ errorText?: string }>("Page.navigate", { url });
    if (r.errorText) throw new Error(`cannot load ${url}: ${r.errorText}`);
    await loaded;
  } finally {
    off();
    clearTimeout(timer);
  }
}
