/**
 * The HTTP server: KServe v2 health, metadata and inference, the text endpoints when the checkpoint has
 * a tokenizer, and Prometheus metrics, on Deno.serve; with `grpcPort`, the KServe v2 gRPC service too
 * (grpc.ts), on the same batcher, limits, metrics and drain. It compiles and runs the first batch shape
 * (so a backend that cannot run fails before listening), listens (/v2/health/live answers while the other
 * plans compile), warms every other shape, then reports ready; inference asked before that gets 503.
 * `drain()` stops taking connections, lets every request in flight finish (their sequences are already
 * queued, and the batcher keeps running), then resolves.
 */
import { Batcher } from "./batcher.ts";
import { restAnswer, splitBinaryRequest } from "./binary.ts";
import { parseJson, readBytes } from "./body.ts";
import type { GrpcServer } from "./grpc.ts";
import { HttpError } from "./http_error.ts";
import { inferResponse, MODEL_VERSION, modelConfig, modelMetadata, parseInferRequest } from "./kserve.ts";
import { ServeMetrics } from "./metrics.ts";
import { createRouter, type Route } from "./router.ts";
import type { RowOutputs, ServedModel } from "./served_model.ts";
import type { EncodedRow } from "../model_io/infer_input.ts";

export interface ServeOptions {
  hostname: string;
  /** 0 picks a free port; the chosen one is in `Server.addr`. */
  port: number;
  /** The gRPC service's port (0: a free one, in `Server.grpcPort`); none when undefined. */
  grpcPort?: number;
  maxDelayMs: number;
  /** Sequences that may wait in the batching queue; one request may hold at most this many. */
  maxQueue: number;
  maxBodyBytes: number;
  /** A request body must arrive within this (408 after). */
  bodyTimeoutMs?: number;
  /** Requests handled at once; past it 503 at once (slow clients cannot pile up without bound). */
  maxInFlight?: number;
  log: (line: string) => void;
  /** Extra routes (the text endpoints), given the function that runs sequences through the batcher. */
  extraRoutes?: (ctx: RouteContext) => Promise<Route[]> | Route[];
}

/** What the routes of every protocol share: the model, its checks and the way into the batcher. */
export interface RouteContext {
  model: ServedModel;
  metrics: ServeMetrics;
  opts: ServeOptions;
  /** Runs sequences through the batcher; each resolves to its own outputs. 503 when not ready. */
  runRows: (rows: EncodedRow[]) => Promise<RowOutputs[]>;
  readBody: (req: Request) => Promise<unknown>;
  /** 404 unless `name` (and `version`, when given) is this server's model. */
  requireModel: (name: string | undefined, version?: string) => void;
  /** Ready and not draining. */
  serving: () => boolean;
  serverMetadata: () => { name: string; version: string; extensions: string[] };
  metadata: () => ReturnType<typeof modelMetadata>;
  /** A KServe v2 request in its JSON shape, checked, run and answered. */
  infer: (body: unknown) => Promise<ReturnType<typeof inferResponse>>;
}

export interface Server {
  readonly addr: Deno.NetAddr;
  readonly grpcPort?: number;
  readonly metrics: ServeMetrics;
  /** Resolves when every shape is compiled and warmed; rejects if warming fails. */
  readonly ready: Promise<void>;
  /** Stops taking requests, finishes those in flight, closes the listener. */
  drain(): Promise<void>;
}

export async function startServer(model: ServedModel, opts: ServeOptions): Promise<Server> {
  const metrics = new ServeMetrics();
  const batcher = new Batcher({
    maxBatch: model.maxBatch,
    maxDelayMs: opts.maxDelayMs,
    maxQueue: opts.maxQueue,
    run: (rows, bucket) => model.run(rows, bucket),
    metrics,
  });
  const state = { ready: false, draining: false };

  const requireModel = (name: string | undefined, version?: string) => {
    if (name !== model.name || (version !== undefined && version !== MODEL_VERSION)) {
      const v = version !== undefined ? ` version ${version}` : "";
      throw new HttpError(
        404,
        `unknown model '${name}'${v} (this server has '${model.name}' version ${MODEL_VERSION})`,
      );
    }
  };
  const requireServing = () => {
    if (state.draining) throw new HttpError(503, "server is shutting down");
    if (!state.ready) {
      throw new HttpError(503, "model is still compiling; see /v2/health/ready", { "retry-after": "1" });
    }
  };
  const runRows = (rows: EncodedRow[]) => {
    requireServing();
    if (rows.length > opts.maxQueue) {
      throw new HttpError(
        413,
        `${rows.length} sequences in one request exceed the limit of ${opts.maxQueue}`,
      );
    }
    const items = rows.map((row) => {
      const bucket = model.bucketFor(row.input_ids.length);
      if (bucket === undefined) {
        throw new HttpError(
          400,
          `sequence of ${row.input_ids.length} tokens exceeds the maximum of ${model.maxSeqLen}`,
        );
      }
      return { row, bucket };
    });
    return Promise.all(batcher.submit(items));
  };
  // Aborted by the drain: bodies still awaited answer 503 at once.
  const stopping = new AbortController();
  const readBody = (req: Request) => readBytes(req, opts.maxBodyBytes, opts.bodyTimeoutMs, stopping.signal);
  const ctx: RouteContext = {
    model,
    metrics,
    opts,
    runRows,
    readBody: async (req) => parseJson(await readBody(req)),
    requireModel,
    serving: () => state.ready && !state.draining,
    serverMetadata: () => ({ name: "bertfuse", version: "1", extensions: ["binary_tensor_data"] }),
    metadata: () => modelMetadata(model),
    infer: async (body) => {
      requireServing();
      const parsed = parseInferRequest(body, model, opts.maxQueue);
      return inferResponse(model, parsed, await runRows(parsed.rows));
    },
  };

  const MODEL = "/v2/models/([^/]+)(?:/versions/([^/]+))?";
  const routes: Route[] = [
    { method: "GET", path: /^\/v2\/health\/live$/, endpoint: "live", handler: () => ({ live: true }) },
    {
      method: "GET",
      path: /^\/v2\/health\/ready$/,
      endpoint: "ready",
      handler: () => {
        if (!ctx.serving()) {
          throw new HttpError(503, state.draining ? "server is shutting down" : "model is still compiling");
        }
        return { ready: true };
      },
    },
    { method: "GET", path: /^\/v2\/?$/, endpoint: "server_metadata", handler: ctx.serverMetadata },
    {
      method: "GET",
      path: new RegExp(`^${MODEL}/ready$`),
      endpoint: "model_ready",
      handler: (_req, [name, version]) => {
        requireModel(name, version);
        requireServing();
        return { name: model.name, ready: true };
      },
    },
    {
      method: "GET",
      path: new RegExp(`^${MODEL}(?:/(config))?/?$`),
      endpoint: "model_metadata",
      handler: (_req, [name, version, config]) => {
        requireModel(name, version);
        return config ? modelConfig(model) : modelMetadata(model);
      },
    },
    {
      method: "POST",
      path: new RegExp(`^${MODEL}/infer$`),
      endpoint: "infer",
      timed: true,
      handler: async (req, [name, version]) => {
        requireModel(name, version);
        requireServing();
        const bytes = await readBody(req);
        const headerLength = req.headers.get("inference-header-content-length");
        return restAnswer(
          await ctx.infer(headerLength === null ? parseJson(bytes) : splitBinaryRequest(bytes, headerLength)),
        );
      },
    },
    {
      method: "GET",
      path: /^\/metrics$/,
      endpoint: "metrics",
      handler: () =>
        new Response(metrics.render(), {
          headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" },
        }),
    },
    ...(await opts.extraRoutes?.(ctx) ?? []),
  ];
  const handle = createRouter(routes, metrics, opts.log, opts.maxInFlight);
  // A line when a plan finishes at least a second after the last line (long warm-ups show progress).
  const t0 = performance.now();
  let last = t0;
  const progress = (b: number, s: number, done: number, of: number) => {
    if (performance.now() - last < 1000) return;
    last = performance.now();
    opts.log(
      `warming: ${done}/${of} plans (batch ${b} × length ${s}) in ${((last - t0) / 1000).toFixed(1)} s`,
    );
  };
  // The first shape before listening: a backend that cannot compile or run fails before the address shows.
  await model.warm(progress, 1);
  // gRPC loads only when asked for (grpc-js is a large module); a taken port fails before any listens.
  let grpcServer: GrpcServer | undefined;
  if (opts.grpcPort !== undefined) {
    grpcServer = await (await import("./grpc.ts")).startGrpc(ctx, opts.hostname, opts.grpcPort);
  }

  return new Promise((resolveStart, rejectStart) => {
    let httpServer: Deno.HttpServer<Deno.NetAddr>;
    try {
      httpServer = Deno.serve({
        hostname: opts.hostname,
        port: opts.port,
        onListen: (addr) => {
          const ready = model.warm(progress).then(() => {
            state.ready = true;
          });
          // The caller awaits `ready`; this keeps an unawaited rejection from killing the process first.
          ready.catch(() => {});
          resolveStart({
            addr,
            grpcPort: grpcServer?.port,
            metrics,
            ready,
            drain: async () => {
              state.draining = true;
              stopping.abort();
              // The bodies just refused are answered before the shutdown starts: one it finds unread, it
              // waits for (until the deadline below).
              await new Promise((r) => setTimeout(r, 0));
              const shut = httpServer.shutdown();
              await batcher.drained();
              // Idle and half-sent connections close at once, but a client that does not read its answer
              // holds the shutdown for ever: the drain waits for it at most the body timeout (the command then
              // exits, closing it; aborting Deno.serve's signal instead throws BadResource once shutting down).
              const late = AbortSignal.timeout(opts.bodyTimeoutMs ?? 10_000);
              await Promise.race([shut, new Promise((r) => late.onabort = r)]);
              // gRPC calls that arrived meanwhile were answered UNAVAILABLE; a stalled one is cut.
              await grpcServer?.close(opts.bodyTimeoutMs ?? 10_000);
            },
          });
        },
        onError: (e) => {
          opts.log(`error: ${e instanceof Error ? e.stack ?? e.message : e}`);
          return new Response(JSON.stringify({ error: "internal error" }), { status: 500 });
        },
      }, handle);
    } catch (e) {
      grpcServer?.close(0);
      rejectStart(e);
    }
  });
}
