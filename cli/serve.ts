/** `deno task serve`: serve a checkpoint over HTTP (KServe v2, text endpoints, metrics) and gRPC. Wiring only. */
import { fileURLToPath } from "node:url";
import { type Head } from "../models/bert.ts";
import { describeChoice, openBackend } from "../engine/choose_backend.ts";
import { ServedModel } from "../serve/served_model.ts";
import { startServer } from "../serve/server.ts";
import { drainOnSignals } from "../serve/signals.ts";
import { textRoutes } from "../serve/text_routes.ts";
import { backendFlags, checkpointFolder, intFlag, numberFlag, oneOf, parseFlags } from "./common.ts";
import { positiveInt, runMain, stringFlags, UsageError } from "./common.ts";
import { kebabFlags } from "./flag_spelling.ts";
import { verifyIfTrainingCheckpoint } from "../training/checkpoint.ts";
import { MAX_TOP_K } from "../textinfer/requests.ts";

const DEFAULT_CHECKPOINT = fileURLToPath(new URL("../tests/fixtures/hf-tiny/qa", import.meta.url));

const HELP = `
deno task serve [--checkpoint DIR] [--model-name NAME] [--head pretraining|classification|qa]
                [--host 127.0.0.1] [--port 8080] [--grpc-port P] [--backend auto|reference|cpu|webgpu|cuda]
                [--no-fuse] [--precision f32|f64] [--max-batch-size 8] [--max-delay-ms 5] [--max-queue 256]
                [--max-body-bytes 1048576] [--body-timeout-ms 10000] [--max-seq-length N] [--buckets 16,32,64,...]
                [--doc-stride N] [--max-query-length N] [--n-best-size N] [--max-answer-length N] [--top-k N]

Serves a Hugging Face BERT checkpoint over HTTP, and gRPC with --grpc-port. Endpoints (docs/serving.md):

  GET  /v2/health/live, /v2/health/ready, /v2, /v2/models/NAME[/ready]    KServe v2 health and metadata
  POST /v2/models/NAME/infer     KServe v2 inference: input_ids, attention_mask, token_type_ids [N,S];
                                 JSON or Triton's binary tensors; GET /v2/models/NAME/config: Triton's config
  gRPC inference.GRPCInferenceService: ServerLive/Ready, ModelReady, Server/ModelMetadata, ModelInfer
  POST /v1/qa                    {"question","context"} -> {"answer","start","end","score",...}
  POST /v1/classify              {"text","text_pair"?} -> {"label","score","scores"}
  POST /v1/fill-mask             {"text","top_k"?} -> {"filled","masks"}
  GET  /metrics                  Prometheus text: requests, errors, batch sizes, queue and compute time

The text endpoints need the checkpoint's tokenizer (vocab.txt or tokenizer.json) and the matching head;
their answers are those of deno task infer --question/--text with the same options.

  --checkpoint DIR      folder with config.json and model.safetensors (Hugging Face layout)
                        default: the tiny random QA checkpoint in tests/fixtures/hf-tiny/qa
  --model-name NAME     the name in /v2/models/NAME (default: the checkpoint folder's name)
  --head H              default: from the config's "architectures", else pretraining
  --host H              address to bind (default 127.0.0.1: this machine only)
  --port P              TCP port (default 8080; 0 picks a free one; the address is printed)
  --grpc-port P         also serve KServe v2 gRPC on this port (0: a free one; printed beside the HTTP one)
  --backend B           as deno task infer (default auto: cuda when the driver sees a GPU, else webgpu on
                        a real GPU adapter, else cpu when there is a C compiler, else reference)
  --no-fuse             cpu, webgpu, cuda: one kernel per primitive op
  --precision P         --backend reference's arithmetic: f32 (default) or f64
  --max-batch-size N    sequences per batch (default 8; 1 turns dynamic batching off)
  --max-delay-ms T      how long a sequence may wait for others to fill its batch (default 5)
  --max-queue N         sequences that may wait; past it requests get 503 (default 256)
  --max-body-bytes N    largest request body; past it 413 (default 1048576)
  --body-timeout-ms N   a body must arrive within N ms, past it 408 (default 10000; headers: docs/serving.md).
                        At most 1024 requests at once (503 past it); text fields: at most 100,000 characters
  --max-seq-length N    longest sequence accepted (default: max_position_embeddings)
  --buckets L           length buckets, comma-separated (default 16, 32, 64, ... to the max; else the largest)
  --doc-stride N, --max-query-length N, --n-best-size N, --max-answer-length N, --top-k N
                        text endpoints: as deno task infer (--max-seq-length also sets the QA window)

Every (batch size, bucket) plan is compiled and run once before the server reports ready (the first
before it listens, so a backend that cannot run fails at once). The cpu backend builds its kernels in
$BERTFUSE_CACHE/cpu (default ~/.cache/bertfuse/cpu); the task may write ~/.cache/bertfuse only. SIGTERM or
SIGINT stop taking connections, answer the requests in flight (503 to a body still arriving), and exit 0.
`;

function bucketList(v: string | undefined): number[] | undefined {
  if (v === undefined) return undefined;
  const xs = v.split(",").map((x) => Number(x.trim()));
  if (!xs.length || xs.some((x) => !Number.isInteger(x) || x <= 0)) {
    throw new UsageError(`--buckets must be comma-separated positive integers, got '${v}'`);
  }
  return [...new Set(xs)].sort((a, b) => a - b);
}

await runMain(async () => {
  const { values } = parseFlags(kebabFlags(Deno.args), {
    ...stringFlags("checkpoint model-name head host port grpc-port backend precision max-batch-size"),
    ...stringFlags("max-delay-ms max-queue max-body-bytes body-timeout-ms max-seq-length buckets doc-stride"),
    ...stringFlags("max-query-length n-best-size max-answer-length top-k"),
    "no-fuse": { type: "boolean" },
  }, HELP);
  const optional = (flag: keyof typeof values) =>
    values[flag] === undefined ? undefined : positiveInt(flag, values[flag] as string, 0);
  const textOptions = {
    maxSeqLength: optional("max-seq-length"),
    docStride: optional("doc-stride"),
    maxQueryLength: optional("max-query-length"),
    nBestSize: optional("n-best-size"),
    maxAnswerLength: optional("max-answer-length"),
    topK: values["top-k"] === undefined
      ? undefined
      : intFlag("top-k", values["top-k"], 0, { min: 1, max: MAX_TOP_K }),
  };
  const backendFlag = backendFlags(values);
  const port = intFlag("port", values.port, 8080, { min: 0, max: 65535 });
  const grpcPort = values["grpc-port"] === undefined
    ? undefined
    : intFlag("grpc-port", values["grpc-port"], 0, { min: 0, max: 65535 });
  // Every batch size up to it gets compiled plans: a huge one only exhausts memory at start-up.
  const maxBatch = intFlag("max-batch-size", values["max-batch-size"], 8, { min: 1, max: 256 });
  const maxDelayMs = numberFlag("max-delay-ms", values["max-delay-ms"], 5, { min: 0 });
  const maxQueue = positiveInt("max-queue", values["max-queue"], 256);
  const maxBodyBytes = positiveInt("max-body-bytes", values["max-body-bytes"], 1 << 20);
  const bodyTimeoutMs = positiveInt("body-timeout-ms", values["body-timeout-ms"], 10_000);
  // Buckets given without --max-seq-length: the largest is the longest sequence served (it used to get the
  // model's 512 appended silently).
  const buckets = bucketList(values.buckets);
  const maxSeqLen = textOptions.maxSeqLength ?? (buckets ? Math.max(...buckets) : undefined);
  const dir = (values.checkpoint ?? DEFAULT_CHECKPOINT).replace(/\/$/, "");
  if (values.checkpoint === undefined) {
    console.error("no --checkpoint given: serving the built-in tiny QA checkpoint");
  }
  const head = values.head === undefined
    ? undefined
    : oneOf<Head>("head", values.head, ["pretraining", "classification", "qa"], "pretraining");

  // One of our training checkpoints is verified in full (manifest, sizes, hashes) as infer and train do.
  checkpointFolder("--checkpoint", dir);
  await verifyIfTrainingCheckpoint(dir);
  const model = await ServedModel.load(dir, {
    name: values["model-name"] ?? dir.slice(dir.lastIndexOf("/") + 1),
    backend: async () => {
      const choice = await openBackend(backendFlag.name);
      console.error(describeChoice(choice));
      return choice.graphBackend(backendFlag);
    },
    head,
    maxBatch,
    maxSeqLen,
    buckets,
  });
  const log = (line: string) => console.error(line);
  let server;
  const t0 = performance.now();
  try {
    server = await startServer(model, {
      hostname: values.host ?? "127.0.0.1",
      port,
      grpcPort,
      maxDelayMs,
      maxQueue,
      maxBodyBytes,
      bodyTimeoutMs,
      log,
      extraRoutes: (ctx) => textRoutes(ctx, textOptions, log),
    });
  } catch (e) {
    const at = `${values.host ?? "127.0.0.1"}:${port}`;
    if (e instanceof Deno.errors.AddrInUse || e instanceof Deno.errors.AddrNotAvailable) {
      throw new UsageError(`cannot listen on ${at}: ${(e as Error).message}`);
    }
    // The task grants the network on 127.0.0.1 only, so binding elsewhere is a deliberate extra step.
    if (e instanceof Deno.errors.NotCapable || e instanceof Deno.errors.PermissionDenied) {
      throw new UsageError(
        `cannot listen on ${at}: deno task serve may bind 127.0.0.1 only; to serve other hosts run ` +
          `deno run --allow-read --allow-write=$HOME/.cache/bertfuse --allow-env --allow-ffi --allow-run ` +
          `--allow-net=${values.host}:${port} cli/serve.ts ...`,
      );
    }
    throw e;
  }
  const stopped = drainOnSignals(server, log);
  const { hostname, port: bound } = server.addr;
  const host = hostname.includes(":") ? `[${hostname}]` : hostname;
  const grpc = server.grpcPort === undefined ? "" : ` and grpc ${host}:${server.grpcPort}`;
  console.log(
    `listening on http://${host}:${bound}${grpc} (model '${model.name}', head ${model.head}, ${model.backend.name})`,
  );
  await server.ready;
  console.log(
    `ready: ${model.batchSizes.length * model.buckets.length} plans (batch ${model.batchSizes.join(",")} × ` +
      `length ${model.buckets.join(",")}) compiled and warmed in ${
        ((performance.now() - t0) / 1000).toFixed(1)
      } s`,
  );
  await stopped;
  console.log("stopped");
  // An open WebGPU device can keep the event loop alive; everything has been answered by now.
  Deno.exit(0);
});
