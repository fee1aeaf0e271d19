/**
 * The KServe v2 gRPC service (`inference.GRPCInferenceService`, kserve_v2.proto) on @grpc/grpc-js, which
 * runs on Deno's node:http2. ModelInfer turns the request into the JSON shape of the REST path and goes
 * through the same checks, batching queue, limits and metrics (endpoint label `grpc_<rpc>`, code the
 * gRPC status name); an HttpError becomes the gRPC status below with the same one-line message.
 */
import * as grpc from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";
import { decodeRaw, rawBytes } from "./binary.ts";
import { badRequest, HttpError, inFlightError, MAX_IN_FLIGHT } from "./http_error.ts";
import type { RouteContext } from "./server.ts";

const STATUS: Record<number, grpc.status> = {
  400: grpc.status.INVALID_ARGUMENT,
  404: grpc.status.NOT_FOUND,
  408: grpc.status.DEADLINE_EXCEEDED,
  413: grpc.status.RESOURCE_EXHAUSTED,
  503: grpc.status.UNAVAILABLE,
};

export const statusOf = (e: HttpError) =>
  e.exhausted ? grpc.status.RESOURCE_EXHAUSTED : STATUS[e.status] ?? grpc.status.INTERNAL;

/** The service definition, for the server and for clients (tests, bench). */
export function kserveService() {
  const def = loadSync(new URL("./kserve_v2.proto", import.meta.url).pathname, {
    keepCase: true,
    longs: Number,
    defaults: true,
    arrays: true,
  });
  // deno-lint-ignore no-explicit-any
  return (grpc.loadPackageDefinition(def).inference as any)
    .GRPCInferenceService as grpc.ServiceClientConstructor;
}

type Message = Record<string, unknown>;

/** A client of the service (tests, bench): `call` resolves to the answer or rejects with a ServiceError. */
export function kserveClient(address: string, options: grpc.ClientOptions = {}) {
  const client = new (kserveService())(address, grpc.credentials.createInsecure(), options);
  type Rpc = (req: Message, done: (e: grpc.ServiceError | null, r: Message) => void) => void;
  const call = (rpc: string, req: Message) =>
    new Promise<Message>((resolve, reject) =>
      (client as unknown as Record<string, Rpc>)[rpc].call(client, req, (e, r) => e ? reject(e) : resolve(r))
    );
  return { call, close: () => client.close() };
}

interface Tensor {
  name: string;
  datatype: string;
  shape: number[];
  contents: { int_contents: number[]; int64_contents: number[] } | null;
}

/** ModelInfer's request as the REST path's JSON body: typed contents or raw bytes become `data`. */
function asJson(
  r: { id: string; inputs: Tensor[]; outputs: { name: string }[]; raw_input_contents: Uint8Array[] },
) {
  const raw = r.raw_input_contents;
  if (raw.length && raw.length !== r.inputs.length) {
    throw badRequest(`raw_input_contents has ${raw.length} entries for ${r.inputs.length} inputs`);
  }
  const inputs = r.inputs.map(({ name, datatype, shape, contents: c }, i) => {
    if (raw.length && c) throw badRequest(`input '${name}': both contents and raw_input_contents`);
    const data = raw.length
      ? decodeRaw(raw[i], name, datatype, shape)
      : datatype === "INT64"
      ? c?.int64_contents
      : c?.int_contents;
    return { name, datatype, shape, data: data ?? [] };
  });
  const outputs = r.outputs.length ? r.outputs.map(({ name }) => ({ name })) : undefined;
  return { ...(r.id ? { id: r.id } : {}), inputs, outputs };
}

export interface GrpcServer {
  port: number;
  /** Lets the calls in flight finish (at most `graceMs`, then cuts them), then closes. */
  close(graceMs: number): Promise<void>;
}

/** HTTP/2 streams one client connection may hold open at once (why: startGrpc). */
export const GRPC_STREAMS_PER_CONNECTION = 64;

export async function startGrpc(ctx: RouteContext, hostname: string, port: number): Promise<GrpcServer> {
  const { metrics, opts } = ctx;
  const maxInFlight = opts.maxInFlight ?? MAX_IN_FLIGHT;
  const server = new grpc.Server({
    // Checked on each message's length prefix, before it is buffered: the REST body limit.
    "grpc.max_receive_message_length": opts.maxBodyBytes,
    // Deno's node:http2 (nghttp2) aborts the process when a client closes a connection with hundreds of
    // calls in flight (denoland/deno#36788): 300 calls, then close, killed it in 6 of 8 tries with 1,024
    // streams a connection, in none of 8 (and none of 6 at 1,000 calls) with 64 (deno task bench:grpc-close;
    // Deno 2.9.6, grpc-js 1.14.7). A client holds its calls past 64 itself: they wait, not fill the queue.
    "grpc.max_concurrent_streams": GRPC_STREAMS_PER_CONNECTION,
  });
  const rpc =
    <T>(name: string, fn: (req: T) => unknown) =>
    async (call: grpc.ServerUnaryCall<T, unknown>, done: grpc.sendUnaryData<unknown>) => {
      const t0 = performance.now();
      let code = grpc.status.OK;
      metrics.inFlight.value++;
      try {
        done(null, await fn(call.request));
      } catch (e) {
        if (!(e instanceof HttpError)) opts.log(`error: gRPC ${name}: ${e instanceof Error ? e.stack : e}`);
        const err = e instanceof HttpError
          ? e
          : new HttpError(500, `internal error: ${String(e).split("\n")[0]}`);
        done({ code: code = statusOf(err), details: err.message });
      } finally {
        metrics.inFlight.value--;
      }
      metrics.answered(`grpc_${name}`, grpc.status[code], code !== grpc.status.OK, t0, name === "ModelInfer");
    };
  type Named = { name: string; version: string };
  server.addService(kserveService().service, {
    ServerLive: rpc("ServerLive", () => ({ live: true })),
    ServerReady: rpc("ServerReady", () => ({ ready: ctx.serving() })),
    ServerMetadata: rpc("ServerMetadata", ctx.serverMetadata),
    ModelReady: rpc(
      "ModelReady",
      (r: Named) => (ctx.requireModel(r.name, r.version || undefined), { ready: ctx.serving() }),
    ),
    ModelMetadata: rpc(
      "ModelMetadata",
      (r: Named) => (ctx.requireModel(r.name, r.version || undefined), ctx.metadata()),
    ),
    ModelInfer: rpc(
      "ModelInfer",
      async (r: Parameters<typeof asJson>[0] & { model_name: string; model_version: string }) => {
        // Counted in the same gauge as REST requests, so one cap holds for both.
        if (metrics.inFlight.value > maxInFlight) throw inFlightError(maxInFlight);
        ctx.requireModel(r.model_name, r.model_version || undefined);
        const res = await ctx.infer(asJson(r));
        return {
          ...res,
          outputs: res.outputs.map(({ name, datatype, shape }) => ({ name, datatype, shape })),
          raw_output_contents: res.outputs.map((o) => rawBytes(o.data)),
        };
      },
    ),
  });
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(
      `${hostname}:${port}`,
      grpc.ServerCredentials.createInsecure(),
      (e, p) =>
        e ? reject(new Deno.errors.AddrInUse(`gRPC on ${hostname}:${port}: ${e.message}`)) : resolve(p),
    )
  );
  return {
    port: bound,
    close: (graceMs) =>
      new Promise((resolve) => {
        const cut = setTimeout(() => (server.forceShutdown(), resolve()), graceMs);
        server.tryShutdown(() => (clearTimeout(cut), resolve()));
      }),
  };
}
