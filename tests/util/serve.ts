/**
 * A server in the test process on a tiny checkpoint (port 0, loopback), with helpers that always read
 * the response body (Deno's resource sanitizer requires it) and a drain at the end.
 */
import type { Backend } from "../../runtime/backend.ts";
import { ServedModel } from "../../serve/served_model.ts";
import { type Server, startServer } from "../../serve/server.ts";
import { textRoutes } from "../../serve/text_routes.ts";
import { ROOT } from "./cli.ts";

export const TINY = `${ROOT}tests/fixtures/hf-tiny`;

export interface TestServerOptions {
  maxBatch?: number;
  maxDelayMs?: number;
  maxQueue?: number;
  maxBodyBytes?: number;
  buckets?: number[];
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
