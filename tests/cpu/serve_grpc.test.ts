/**
 * The KServe v2 gRPC service through a real gRPC client (@grpc/grpc-js over HTTP/2, on the .proto the
 * server loads): health, metadata, ModelInfer with typed and raw contents equal to the REST JSON answer
 * bit for bit, and the errors as gRPC status codes with the REST path's one-line messages.
 */
import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { connect, type Settings } from "node:http2";
import { GRPC_STREAMS_PER_CONNECTION, kserveClient } from "../../serve/grpc.ts";
import { referenceBackend, serveForTest, type TestServerOptions } from "../util/serve.ts";

type Obj = Record<string, unknown>;
const IDS = [2, 5, 6, 7, 8, 2, 9, 8, 1, 4];

async function grpcServer(opts: TestServerOptions = {}) {
  const s = await serveForTest("qa", referenceBackend(), { grpcPort: 0, ...opts });
  const client = kserveClient(`127.0.0.1:${s.server.grpcPort}`);
  const call = client.call;
  const fails = async (req: Promise<Obj>, code: grpc.status, message: RegExp) => {
    const e = await req.then(() => assert.fail("expected an error"), (e) => e as grpc.ServiceError);
    assert.equal(grpc.status[e.code], grpc.status[code], e.details);
    assert.match(e.details, message);
  };
  return { s, call, fails, client, close: async () => (client.close(), await s.close()) };
}

const infer = (inputs: Obj[], extra: Obj = {}): Obj => ({ model_name: "qa", inputs, ...extra });
const ids64 = { name: "input_ids", datatype: "INT64", shape: [2, 5], contents: { int64_contents: IDS } };
const f32 = (b: Uint8Array) => new Float32Array(new Uint8Array(b).buffer);

Deno.test({
  name: "gRPC health, metadata and ModelInfer (typed and raw contents) equal REST JSON bit for bit",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const { s, call, close } = await grpcServer();
    try {
      assert.deepEqual(await call("ServerLive", {}), { live: true });
      assert.deepEqual(await call("ServerReady", {}), { ready: true });
      assert.deepEqual(await call("ModelReady", { name: "qa" }), { ready: true });
      const meta = await call("ServerMetadata", {});
      assert.deepEqual(meta.extensions, ["binary_tensor_data"]);
      const model = await call("ModelMetadata", { name: "qa", version: "1" }) as { outputs: Obj[] };
      assert.deepEqual(model.outputs.map((o) => [o.name, o.datatype, o.shape]), [
        ["start_logits", "FP32", [-1, -1]],
        ["end_logits", "FP32", [-1, -1]],
      ]);
      const rest = await s.post("/v2/models/qa/infer", {
        inputs: [{ name: "input_ids", shape: [2, 5], datatype: "INT64", data: IDS }],
      });
      const want = (rest.body as { outputs: { name: string; data: number[] }[] }).outputs;
      const raw32 = new Uint8Array(Int32Array.from(IDS).buffer);
      for (
        const req of [
          infer([ids64], { id: "r1" }),
          infer([{ ...ids64, datatype: "INT32", contents: null }], { raw_input_contents: [raw32] }),
          infer([{ ...ids64, datatype: "INT32", contents: { int_contents: IDS } }], { model_version: "1" }),
        ]
      ) {
        const r = await call("ModelInfer", req) as {
          outputs: Obj[];
          raw_output_contents: Uint8Array[];
          id: string;
        };
        assert.equal(r.id, req.id ?? "");
        assert.deepEqual(r.outputs.map((o) => [o.name, o.datatype, o.shape]), [
          ["start_logits", "FP32", [2, 5]],
          ["end_logits", "FP32", [2, 5]],
        ]);
        want.forEach((o, k) =>
          assert.deepEqual(f32(r.raw_output_contents[k]), Float32Array.from(o.data), o.name)
        );
      }
      const one = await call("ModelInfer", infer([ids64], { outputs: [{ name: "end_logits" }] })) as Obj;
      assert.deepEqual((one.outputs as Obj[]).map((o) => o.name), ["end_logits"]);
      const metrics = (await s.get("/metrics")).text;
      assert.match(metrics, /bertfuse_requests_total\{endpoint="grpc_ModelInfer",code="OK"\} 4/);
      // 64 streams a connection at most (serve/grpc.ts says why) in the server's HTTP/2 SETTINGS; a client holds
      // the calls past it, so 100 at once on one channel all answer (the test server queues 64 sequences).
      const h2 = connect(`http://127.0.0.1:${s.server.grpcPort}`);
      const settings = await new Promise<Settings>((r) => h2.once("remoteSettings", r));
      assert.equal((h2.close(), settings.maxConcurrentStreams), GRPC_STREAMS_PER_CONNECTION);
      const row = { ...ids64, shape: [1, 5], contents: { int64_contents: IDS.slice(5) } };
      const many = await Promise.all(Array.from({ length: 100 }, () => call("ModelInfer", infer([row]))));
      assert.ok(many.every((r) => (r.outputs as Obj[]).length === 2));
    } finally {
      await close();
    }
  },
});

Deno.test({
  name:
    "gRPC errors: INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE draining",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // A long delay keeps sequences waiting for batch-mates: the queue of 2 fills, and a drain has work.
    const { call, fails, client, s } = await grpcServer({ maxBatch: 8, maxDelayMs: 400, maxQueue: 2 });
    let drained: Promise<void> | undefined;
    const one = { ...ids64, shape: [1, 5], contents: { int64_contents: IDS.slice(0, 5) } };
    try {
      const BAD = grpc.status.INVALID_ARGUMENT;
      const cases: [Obj, grpc.status, RegExp][] = [
        [{ ...infer([one]), model_name: "bert" }, grpc.status.NOT_FOUND, /^unknown model 'bert'/],
        [infer([{ ...one, datatype: "FP32" }]), BAD, /datatype must be INT32 or INT64/],
        [
          infer([{ ...one, contents: null }], { raw_input_contents: [new Uint8Array(12)] }),
          BAD,
          /input 'input_ids': 12 bytes of data, but shape \[1,5\] of INT64 takes 40/,
        ],
        [
          infer([one], { raw_input_contents: [new Uint8Array(40), new Uint8Array(4)] }),
          BAD,
          /raw_input_contents has 2 entries for 1 inputs/,
        ],
        [
          infer([{ ...one, contents: { int64_contents: [2, 99, 1, 1, 1] } }]),
          BAD,
          /element 1 = 99 is outside the vocabulary/,
        ],
        [infer([one], { outputs: [{ name: "logits" }] }), BAD, /unknown output "logits"/],
        [{ name: "qb" }, grpc.status.NOT_FOUND, /unknown model 'qb'/],
      ];
      for (const [req, code, message] of cases) {
        await fails(call("name" in req ? "ModelMetadata" : "ModelInfer", req), code, message);
      }
      const waiting = [call("ModelInfer", infer([one])), call("ModelInfer", infer([one]))];
      await new Promise((r) => setTimeout(r, 100));
      await fails(
        call("ModelInfer", infer([one])),
        grpc.status.RESOURCE_EXHAUSTED,
        /server busy: 2 sequences queued/,
      );
      drained = s.close();
      await fails(call("ModelInfer", infer([one])), grpc.status.UNAVAILABLE, /server is shutting down/);
      for (const r of await Promise.all(waiting)) assert.equal((r.outputs as Obj[]).length, 2);
    } finally {
      client.close();
      await (drained ?? s.close());
    }
  },
});
