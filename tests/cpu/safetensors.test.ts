import assert from "node:assert/strict";
import {
  itemSize,
  parseSafetensors,
  readSafetensorsFile,
  type SafeDType,
  SafetensorsError,
  serializeSafetensors,
  type TensorInput,
  toFloat32,
  toFloat64,
  writeSafetensorsFile,
} from "../../model_io/safetensors.ts";
import { roundBF16, roundF16 } from "../../numeric/half.ts";
import { seededRandom } from "../../cases/random.ts";

const rng = (seed: number) => seededRandom(seed).u32;
const next = rng(2024);
const randFloat = () => (next() / 2 ** 32 - 0.5) * 2 ** ((next() % 20) - 10);
const randInt = (lo: number, hi: number) => lo + (next() % (hi - lo + 1));

/**
 * Builds a file by hand, independent of the serializer: u64 LE length, header text, optional padding,
 * then the raw data bytes.
 */
function buildFile(header: string, data: Uint8Array = new Uint8Array(0), pad = 0): Uint8Array {
  const text = new TextEncoder().encode(header + " ".repeat(pad));
  const buf = new Uint8Array(8 + text.length + data.length);
  new DataView(buf.buffer).setBigUint64(0, BigInt(text.length), true);
  buf.set(text, 8);
  buf.set(data, 8 + text.length);
  return buf;
}

function expectError(buf: Uint8Array, fragment: string): void {
  assert.throws(
    () => parseSafetensors(buf, "bad.safetensors"),
    (e: unknown) => {
      assert.ok(e instanceof SafetensorsError, `not a SafetensorsError: ${e}`);
      assert.ok(e.message.includes("bad.safetensors"), e.message);
      assert.ok(e.message.includes(fragment), `"${e.message}" lacks "${fragment}"`);
      return true;
    },
  );
}

Deno.test("round trip of every dtype on random data", () => {
  const f32 = Float32Array.from({ length: 24 }, randFloat);
  const f64 = Float64Array.from({ length: 7 }, randFloat);
  const f16Src = Array.from({ length: 13 }, randFloat);
  const bf16Src = Float64Array.from({ length: 9 }, randFloat);
  const rawF16 = Uint16Array.from({ length: 5 }, () => randInt(0, 0x7bff));
  const i64 = Array.from({ length: 6 }, () => randInt(0, 2 ** 31) * (next() % 2 ? 1 : -1) * 3000);
  const i64Big = BigInt64Array.from({ length: 3 }, () => BigInt(randInt(0, 1e9)) * -123456789n);
  const i32 = Int32Array.from({ length: 10 }, () => randInt(0, 2 ** 32 - 1) | 0);
  const i16 = Array.from({ length: 5 }, () => randInt(0, 0xffff) - 0x8000);
  const i8 = Array.from({ length: 7 }, () => randInt(0, 255) - 128);
  const u8 = Uint8Array.from({ length: 11 }, () => randInt(0, 255));
  const bool = Array.from({ length: 9 }, () => next() % 2);
  const tensors: Record<string, TensorInput> = {
    "enc.f32": { dtype: "F32", shape: [4, 6], data: f32 },
    "enc.f64": { dtype: "F64", shape: [7], data: f64 },
    "enc.f16": { dtype: "F16", shape: [13, 1], data: f16Src },
    "enc.bf16": { dtype: "BF16", shape: [3, 3], data: bf16Src },
    "enc.f16raw": { dtype: "F16", shape: [5], data: rawF16 },
    "ids.i64": { dtype: "I64", shape: [2, 3], data: i64 },
    "ids.i64big": { dtype: "I64", shape: [3], data: i64Big },
    "ids.i32": { dtype: "I32", shape: [10], data: i32 },
    "ids.i16": { dtype: "I16", shape: [5], data: i16 },
    "ids.i8": { dtype: "I8", shape: [7], data: i8 },
    "ids.u8": { dtype: "U8", shape: [11], data: u8 },
    "mask": { dtype: "BOOL", shape: [9], data: bool },
    "scalar": { dtype: "F32", shape: [], data: [2.5] },
    "empty": { dtype: "F16", shape: [0, 4], data: [] },
  };
  const meta = { format: "pt", "model": "bert-tiny", "ünïcode": "✓" };
  const parsed = parseSafetensors(serializeSafetensors(tensors, meta), "rt");
  assert.deepEqual(parsed.metadata, meta);
  assert.deepEqual([...parsed.tensors.keys()].sort(), Object.keys(tensors).sort());
  for (const [name, t] of Object.entries(tensors)) {
    const e = parsed.tensors.get(name)!;
    assert.equal(e.dtype, t.dtype, name);
    assert.deepEqual(e.shape, t.shape, name);
    assert.equal(e.bytes.length, t.data.length * itemSize(t.dtype), name);
  }
  const got = (name: string) => [...toFloat64(parsed.tensors.get(name)!)];
  assert.deepEqual(got("enc.f32"), [...f32]);
  assert.deepEqual(got("enc.f64"), [...f64]);
  assert.deepEqual(got("enc.f16"), f16Src.map(roundF16));
  assert.deepEqual(got("enc.bf16"), [...bf16Src].map(roundBF16));
  assert.deepEqual([...new Uint16Array(parsed.tensors.get("enc.f16raw")!.bytes.slice().buffer)], [...rawF16]);
  assert.deepEqual(got("ids.i64"), i64);
  assert.deepEqual(got("ids.i64big"), [...i64Big].map(Number));
  assert.deepEqual(got("ids.i32"), [...i32]);
  assert.deepEqual(got("ids.i16"), i16);
  assert.deepEqual(got("ids.i8"), i8);
  assert.deepEqual(got("ids.u8"), [...u8]);
  assert.deepEqual(got("mask"), bool);
  assert.deepEqual(got("scalar"), [2.5]);
  assert.deepEqual(got("empty"), []);
  assert.deepEqual([...toFloat32(parsed.tensors.get("enc.f64")!)], [...Float32Array.from(f64)]);
  assert.deepEqual([...toFloat32(parsed.tensors.get("enc.f32")!)], [...f32]);
});

Deno.test("serializer output is byte-identical, independent of insertion order", () => {
  const entries: [string, TensorInput][] = [
    ["b", { dtype: "F16", shape: [3], data: [1, 2, 3] }],
    ["a", { dtype: "F32", shape: [2], data: Float32Array.from([randFloat(), randFloat()]) }],
    ["c", { dtype: "U8", shape: [1], data: [7] }],
    ["a.long.name", { dtype: "I64", shape: [1], data: [-5] }],
  ];
  const one = serializeSafetensors(new Map(entries), { z: "1", a: "2" });
  const two = serializeSafetensors(new Map([...entries].reverse()), { a: "2", z: "1" });
  const three = serializeSafetensors(Object.fromEntries(entries), { z: "1", a: "2" });
  assert.deepEqual(two, one);
  assert.deepEqual(three, one);
});

Deno.test("serializer layout: padded header, contiguous aligned tensors covering the data", () => {
  const buf = serializeSafetensors({
    odd16: { dtype: "BF16", shape: [3], data: [1, 2, 3] },
    b8: { dtype: "BOOL", shape: [1], data: [1] },
    f32: { dtype: "F32", shape: [3], data: [1, 2, 3] },
    f64: { dtype: "F64", shape: [1], data: [4] },
  });
  const n = Number(new DataView(buf.buffer).getBigUint64(0, true));
  assert.equal(n % 8, 0);
  const header = JSON.parse(new TextDecoder().decode(buf.subarray(8, 8 + n)));
  const spans = Object.values(header as Record<string, { data_offsets: [number, number]; dtype: SafeDType }>)
    .sort((x, y) => x.data_offsets[0] - y.data_offsets[0]);
  let pos = 0;
  for (const s of spans) {
    assert.equal(s.data_offsets[0], pos); // no gaps: strict readers reject them
    assert.equal(s.data_offsets[0] % itemSize(s.dtype), 0); // aligned for in-place views
    pos = s.data_offsets[1];
  }
  assert.equal(pos, buf.length - 8 - n);
});

Deno.test("hand-built file parses to the right values, aligned or not", () => {
  const data = new Uint8Array(64);
  const dv = new DataView(data.buffer);
  // F32 [2,2] at 0..16
  [1, -2, 0.5, 3].forEach((v, i) => dv.setFloat32(4 * i, v, true));
  // I64 [2] at 16..32
  dv.setBigInt64(16, -7n, true);
  dv.setBigInt64(24, 9007199254740991n, true);
  // F64 [1] at 32..40
  dv.setFloat64(32, Math.PI, true);
  // F16 [3] at 40..46: 1, -2, 65504
  [0x3c00, 0xc000, 0x7bff].forEach((b, i) => dv.setUint16(40 + 2 * i, b, true));
  // BF16 [1] at 46..48: 1.0
  dv.setUint16(46, 0x3f80, true);
  // I32 [1] at 48..52, I16 [1] at 52..54, I8 [2] at 54..56, U8 [2] at 56..58, BOOL [3] at 58..61
  dv.setInt32(48, -123456, true);
  dv.setInt16(52, -300, true);
  dv.setInt8(54, -1);
  dv.setInt8(55, 127);
  data.set([200, 0], 56);
  data.set([1, 0, 1], 58);
  const header = `{"__metadata__":{"format":"pt"},` +
    `"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},` +
    `"ids":{"dtype":"I64","shape":[2],"data_offsets":[16,32]},` +
    `"pi":{"dtype":"F64","shape":[],"data_offsets":[32,40]},` +
    `"h":{"dtype":"F16","shape":[3],"data_offsets":[40,46]},` +
    `"g":{"dtype":"BF16","shape":[1],"data_offsets":[46,48]},` +
    `"i32":{"dtype":"I32","shape":[1],"data_offsets":[48,52]},` +
    `"i16":{"dtype":"I16","shape":[1],"data_offsets":[52,54]},` +
    `"i8":{"dtype":"I8","shape":[2],"data_offsets":[54,56]},` +
    `"u8":{"dtype":"U8","shape":[2],"data_offsets":[56,58]},` +
    `"m":{"dtype":"BOOL","shape":[3],"data_offsets":[58,61]}}`;
  const expected: Record<string, number[]> = {
    w: [1, -2, 0.5, 3],
    ids: [-7, 9007199254740991],
    pi: [Math.PI],
    h: [1, -2, 65504],
    g: [1],
    i32: [-123456],
    i16: [-300],
    i8: [-1, 127],
    u8: [200, 0],
    m: [1, 0, 1],
  };
  // Pad 0..7 spaces: all but one leave the data buffer misaligned, exercising the copy path.
  for (let pad = 0; pad < 8; pad++) {
    const parsed = parseSafetensors(buildFile(header, data, pad), "hand");
    assert.deepEqual(parsed.metadata, { format: "pt" });
    assert.deepEqual(parsed.tensors.get("w")!.shape, [2, 2]);
    assert.deepEqual(parsed.tensors.get("pi")!.shape, []);
    for (const [name, values] of Object.entries(expected)) {
      const e = parsed.tensors.get(name)!;
      assert.deepEqual([...toFloat64(e)], values, `${name} pad ${pad}`);
      assert.deepEqual([...toFloat32(e)], [...Float32Array.from(values)], `${name} pad ${pad}`);
    }
    // The entry is a view into the file buffer, not a copy.
    const w = parsed.tensors.get("w")!;
    assert.equal(w.bytes.byteOffset, 8 + header.length + pad);
  }
});

Deno.test("empty file, no metadata, zero-size tensors and tolerated gaps parse", () => {
  assert.equal(parseSafetensors(buildFile("{}"), "e").tensors.size, 0);
  const gap = buildFile(
    `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"z":{"dtype":"F32","shape":[0],"data_offsets":[1,1]},` +
      `"b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}`,
    new Uint8Array([5, 0, 0, 6]),
  );
  const p = parseSafetensors(gap, "gap");
  assert.deepEqual([...toFloat64(p.tensors.get("b")!)], [6]);
  assert.deepEqual(p.metadata, {});
});

Deno.test("malformed files raise SafetensorsError naming the file and the problem", () => {
  const t = (dtype: string, shape: string, offsets: string) =>
    `{"t":{"dtype":${dtype},"shape":${shape},"data_offsets":${offsets}}}`;
  const d8 = new Uint8Array(8);
  expectError(new Uint8Array(5), "shorter than");
  const longHeader = buildFile("{}");
  new DataView(longHeader.buffer).setBigUint64(0, 1000n, true);
  expectError(longHeader, "header length");
  const hugeHeader = buildFile("{}");
  new DataView(hugeHeader.buffer).setBigUint64(0, 2n ** 63n, true);
  expectError(hugeHeader, "header length");
  expectError(buildFile("{not json"), "not valid JSON");
  expectError(buildFile("[1,2]"), "not an object");
  const badUtf8 = buildFile("{}  ");
  badUtf8[9] = 0xff;
  expectError(badUtf8, "UTF-8");
  expectError(buildFile(`{"t":3}`), "not an object");
  expectError(buildFile(t(`"F128"`, "[2]", "[0,8]"), d8), "unknown dtype");
  expectError(buildFile(t(`"U16"`, "[2]", "[0,4]"), d8), "unknown dtype");
  expectError(buildFile(t(`"F32"`, `"2"`, "[0,8]"), d8), "shape");
  expectError(buildFile(t(`"F32"`, "[-2]", "[0,8]"), d8), "shape");
  expectError(buildFile(t(`"F32"`, "[1.5]", "[0,8]"), d8), "shape");
  expectError(buildFile(t(`"F32"`, "[2]", "[0,16]"), d8), "data buffer");
  expectError(buildFile(t(`"F32"`, "[2]", "[0]"), d8), "data_offsets");
  expectError(buildFile(t(`"F32"`, "[2]", "[-1,7]"), d8), "data_offsets");
  expectError(buildFile(t(`"F32"`, "[2]", "[8,0]"), d8), "begin after end");
  expectError(buildFile(t(`"F32"`, "[1]", "[0,8]"), d8), "needs 4");
  expectError(buildFile(t(`"F16"`, "[3]", "[0,8]"), d8), "needs 6");
  expectError(buildFile(t(`"F32"`, "[4294967296, 4294967296, 4294967296]", "[0,8]"), d8), "too large");
  expectError(
    buildFile(
      `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"I16","shape":[2],"data_offsets":[2,6]}}`,
      d8,
    ),
    "overlap",
  );
  expectError(buildFile(`{"__metadata__":{"k":1}}`), "metadata value");
  expectError(buildFile(`{"__metadata__":["x"]}`), "__metadata__");
});

Deno.test("writer rejects inputs it cannot represent faithfully", () => {
  const bad = (tensors: Record<string, TensorInput>, fragment: string) =>
    assert.throws(
      () => serializeSafetensors(tensors, undefined, "out.safetensors"),
      (e: unknown) => e instanceof SafetensorsError && e.message.includes(fragment),
    );
  bad({ t: { dtype: "F32", shape: [2, 2], data: [1, 2, 3] } }, "needs 4");
  bad({ t: { dtype: "I32", shape: [1], data: [1.5] } }, "not representable");
  bad({ t: { dtype: "I8", shape: [1], data: [128] } }, "not representable");
  bad({ t: { dtype: "U8", shape: [1], data: [-1] } }, "not representable");
  bad({ t: { dtype: "BOOL", shape: [1], data: [2] } }, "not representable");
  bad({ t: { dtype: "I64", shape: [1], data: [2 ** 60] } }, "not representable");
  bad({ t: { dtype: "F32", shape: [-1], data: [] } }, "shape");
  bad({ t: { dtype: "Q4" as SafeDType, shape: [1], data: [1] } }, "unknown dtype");
  bad({ t: { dtype: "F32", shape: [1], data: BigInt64Array.of(1n) } }, "I64");
  bad({ __metadata__: { dtype: "F32", shape: [1], data: [1] } }, "reserved");
});

Deno.test("files round-trip through disk with an atomic write", async () => {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-st-" });
  try {
    const path = `${dir}/model.safetensors`;
    const w = Float32Array.from({ length: 12 }, randFloat);
    await writeSafetensorsFile(path, { w: { dtype: "F32", shape: [3, 4], data: w } }, { step: "3" });
    await writeSafetensorsFile(path, { w: { dtype: "F32", shape: [3, 4], data: w } }, { step: "4" }); // overwrite
    const names = [];
    for await (const e of Deno.readDir(dir)) names.push(e.name);
    assert.deepEqual(names, ["model.safetensors"]); // no temporary file left behind
    const parsed = await readSafetensorsFile(path);
    assert.deepEqual(parsed.metadata, { step: "4" });
    assert.deepEqual([...toFloat32(parsed.tensors.get("w")!)], [...w]);

    await Deno.writeFile(`${dir}/broken.safetensors`, new Uint8Array(3));
    await assert.rejects(
      () => readSafetensorsFile(`${dir}/broken.safetensors`),
      (e: unknown) => e instanceof SafetensorsError && e.message.includes(`${dir}/broken.safetensors`),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("names like __proto__ are ordinary tensor and metadata keys", () => {
  const tensors = new Map<string, TensorInput>([["__proto__", { dtype: "U8", shape: [1], data: [9] }]]);
  const metadata = JSON.parse(`{"__proto__":"meta"}`) as Record<string, string>;
  const parsed = parseSafetensors(serializeSafetensors(tensors, metadata), "proto");
  assert.deepEqual([...toFloat64(parsed.tensors.get("__proto__")!)], [9]);
  assert.equal(Object.getOwnPropertyDescriptor(parsed.metadata, "__proto__")?.value, "meta");
  assert.equal(Object.getPrototypeOf(parsed.metadata), Object.prototype);
});
