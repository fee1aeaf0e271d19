// One KServe v2 ModelInfer call from Node.js: `node grpc_node_client.mjs ADDRESS REQUEST_JSON`. It prints
// "connected" once the channel is up, then the answer (or the error) as one JSON line, and exits.
//
// Why Node and not the test's own process: Deno 2.9's node:http2 can abort the whole process, the test
// runner with it, when a client session receives the server's GOAWAY (denoland/deno#36788: an nghttp2
// assertion in find_stream_on_goaway_func, or a segfault). A draining server sends exactly that; seen in 2
// of 12 runs of tests/cpu/serve_cli.test.ts. Node's HTTP/2 is the one most gRPC-js users run.
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const grpc = require("@grpc/grpc-js");
const { loadSync } = require("@grpc/proto-loader");

const [address, request] = process.argv.slice(2);
const proto = new URL("../../serve/kserve_v2.proto", import.meta.url).pathname;
const def = loadSync(proto, { keepCase: true, longs: Number, defaults: true, arrays: true });
const Service = grpc.loadPackageDefinition(def).inference.GRPCInferenceService;
const client = new Service(address, grpc.credentials.createInsecure());
client.waitForReady(Date.now() + 20_000, (e) => {
  if (e) return console.log(JSON.stringify({ error: e.message })), process.exit(1);
  console.log("connected");
  client.ModelInfer(JSON.parse(request), (e, r) => {
    const raw = r?.raw_output_contents.map((b) => b.byteLength);
    console.log(JSON.stringify(e ? { error: e.details, code: e.code } : { raw_output_bytes: raw }));
    process.exit(0);
  });
});
