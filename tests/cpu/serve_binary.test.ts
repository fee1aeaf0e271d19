/**
 * KServe v2 REST as the real clients send it: Triton's binary tensor data extension both ways, the
 * model's name and version in the body, and Triton's model configuration, on the reference backend.
 *
 * The bytes are those tritonclient.http builds (its InferInput.set_data_from_numpy and
 * InferRequestedOutput(binary_data=True), documented in triton-inference-server/server
 * docs/protocol/extension_binary_data.md): a JSON header whose inputs carry
 * `parameters.binary_data_size`, then each such input's `ndarray.tobytes()` (row-major, little-endian)
 * in input order, the header's length in `Inference-Header-Content-Length`.
 */
import assert from "node:assert/strict";
import { referenceBackend, serveForTest } from "../util/serve.ts";

type Obj = Record<string, unknown>;
const IDS = [[2, 5, 6, 7, 8], [2, 9, 8, 1, 4]];
const MASK = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]];
const raw = (rows: number[][], datatype: "INT32" | "INT64") =>
  new Uint8Array(
    datatype === "INT32"
      ? Int32Array.from(rows.flat()).buffer
      : BigInt64Array.from(rows.flat().map(BigInt)).buffer,
  );

/** tritonclient's request: each input binary unless `json` names it; `extra` joins the header. */
function tritonBody(inputs: [string, string, number[][]][], extra: Obj = {}, sizes: number[] = []) {
  const chunks = inputs.map(([, dt, rows]) => raw(rows, dt as "INT32"));
  const header = new TextEncoder().encode(JSON.stringify({
    inputs: inputs.map(([name, datatype, rows], i) => ({
      name,
      datatype,
      shape: [rows.length, rows[0].length],
      parameters: { binary_data_size: sizes[i] ?? chunks[i].byteLength },
    })),
    ...extra,
  }));
  return { body: new Blob([header, ...chunks]), length: header.byteLength };
}

/** The answer's JSON header and its binary outputs as Float32Arrays, by name. */
async function split(r: Response) {
  const bytes = new Uint8Array(await r.arrayBuffer());
  const length = Number(r.headers.get("inference-header-content-length") ?? bytes.byteLength);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(0, length)));
  const data = new Map<string, Float32Array>();
  let at = length;
  for (const o of header.outputs) {
    const size = o.parameters?.binary_data_size;
    const f = size === undefined
      ? Float32Array.from(o.data)
      : new Float32Array(bytes.slice(at, at += size).buffer);
    data.set(o.name, f);
  }
  return { status: r.status, header, data };
}

Deno.test("binary tensors both ways, body model_name/version and the config equal the JSON path bit for bit", async () => {
  const s = await serveForTest("qa", referenceBackend());
  const url = `${s.url}/v2/models/qa/infer`;
  const send = (b: ReturnType<typeof tritonBody>) =>
    fetch(url, {
      method: "POST",
      body: b.body,
      headers: { "inference-header-content-length": String(b.length) },
    });
  try {
    const plain = await split(
      await fetch(url, {
        method: "POST",
        body: JSON.stringify({
          inputs: [
            { name: "input_ids", shape: [2, 5], datatype: "INT64", data: IDS },
            { name: "attention_mask", shape: [2, 5], datatype: "INT32", data: MASK },
          ],
        }),
      }),
    );
    assert.equal(plain.status, 200);
    const inputs: [string, string, number[][]][] = [["input_ids", "INT64", IDS], [
      "attention_mask",
      "INT32",
      MASK,
    ]];
    const cases: [string, Obj, string[]][] = [
      ["every output binary", { parameters: { binary_data_output: true } }, ["start_logits", "end_logits"]],
      // tritonclient's InferRequestedOutput(name, binary_data=True); the other output stays JSON.
      ["one output binary", {
        outputs: [{ name: "end_logits", parameters: { binary_data: true } }, { name: "start_logits" }],
      }, ["end_logits"]],
      // What the kserve SDK's InferRequest always adds.
      ["JSON outputs, model named", { id: "7", model_name: "qa", model_version: "1" }, []],
    ];
    for (const [what, extra, binary] of cases) {
      const r = await send(tritonBody(inputs, extra));
      const got = await split(r);
      assert.equal(got.status, 200, `${what}: ${JSON.stringify(got.header)}`);
      const asBinary = got.header.outputs.filter((o: Obj) => o.data === undefined).map((o: Obj) => o.name);
      assert.deepEqual(asBinary.sort(), [...binary].sort(), what);
      assert.equal(
        r.headers.get("content-type"),
        binary.length ? "application/octet-stream" : "application/json",
      );
      for (const [name, f] of got.data) {
        assert.deepEqual(
          new Uint8Array(f.buffer),
          new Uint8Array(plain.data.get(name)!.buffer),
          `${what}: ${name}`,
        );
      }
    }
    assert.deepEqual((await s.get("/v2")).body, {
      name: "bertfuse",
      version: "1",
      extensions: ["binary_tensor_data"],
    });
    const config = (await s.get("/v2/models/qa/config")).body as Obj;
    assert.deepEqual(config, {
      name: "qa",
      platform: "bertfuse",
      max_batch_size: 4,
      input: ["input_ids", "attention_mask", "token_type_ids"].map((name) => ({
        name,
        data_type: "TYPE_INT32",
        dims: [-1],
      })),
      output: ["start_logits", "end_logits"].map((name) => ({ name, data_type: "TYPE_FP32", dims: [-1] })),
    });
  } finally {
    await s.close();
  }
});

Deno.test("binary requests that do not add up are a 400 naming the tensor, never 'not valid UTF-8'", async () => {
  const s = await serveForTest("qa", referenceBackend());
  const ids: [string, string, number[][]][] = [["input_ids", "INT64", IDS]];
  const post = async (b: { body: Blob; length: number | string }) => {
    const r = await fetch(`${s.url}/v2/models/qa/infer`, {
      method: "POST",
      body: b.body,
      headers: { "inference-header-content-length": String(b.length) },
    });
    return { status: r.status, body: await r.json() };
  };
  const good = tritonBody(ids);
  const cases: [string, Promise<{ status: number; body: unknown }>, RegExp][] = [
    [
      "size not the shape's",
      post(tritonBody(ids, {}, [72])),
      /input 'input_ids': 72 bytes of data, but shape \[2,5\] of INT64 takes 80/,
    ],
    [
      "size past the body",
      post(tritonBody(ids, {}, [88])),
      /input 'input_ids': binary_data_size 88 runs past the end of the body \(80 bytes left\)/,
    ],
    [
      "header past the body",
      post({ ...good, length: 99999 }),
      /Inference-Header-Content-Length 99999 is past the end of the \d+-byte body/,
    ],
    ["header length not a number", post({ ...good, length: "ten" }), /must be a byte count, got 'ten'/],
    [
      "bytes left over",
      post({ body: new Blob([good.body, new Uint8Array(3)]), length: good.length }),
      /3 bytes after the last binary input/,
    ],
    // tritonclient with np.float32 data: the datatype is named, as on the JSON path.
    [
      "float datatype",
      post(tritonBody([["input_ids", "FP32", IDS]])),
      /input 'input_ids': datatype must be INT32 or INT64, got "FP32"/,
    ],
    ["header cut short", post({ ...good, length: 10 }), /inference request header is not valid JSON/],
    [
      "another model",
      s.post("/v2/models/qa/infer", { model_name: "bert", inputs: [] }),
      /'model_name' "bert" is not this URL's model 'qa'/,
    ],
    [
      "another version",
      s.post("/v2/models/qa/infer", { model_version: "2", inputs: [] }),
      /'model_version' "2" is not this model's '1'/,
    ],
  ];
  try {
    for (const [what, reply, message] of cases) {
      const r = await reply;
      assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
      assert.match((r.body as { error: string }).error, message, what);
    }
  } finally {
    await s.close();
  }
});
