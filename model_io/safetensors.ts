/**
 * Reader and writer for the safetensors checkpoint format: an 8-byte little-endian u64 N, N bytes of UTF-8
 * JSON header mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (relative to the
 * data buffer) plus an optional "__metadata__" of strings, then the little-endian, row-major data. Reading
 * validates the whole header (a corrupt file fails here, naming it); gaps between tensors are tolerated,
 * overlaps and out-of-range offsets are not. Writing is deterministic: keys in code-unit order, data by
 * decreasing element size, then name (the reference library's order: every tensor aligned to its element
 * size, viewable in place), the header space-padded so that the data starts 8-byte aligned.
 */
import { decodeBF16, decodeF16, encodeBF16, encodeF16 } from "../numeric/half.ts";

export type SafeDType = "F64" | "F32" | "F16" | "BF16" | "I64" | "I32" | "I16" | "I8" | "U8" | "BOOL";

/** One tensor of a parsed file; `bytes` is a view into the file buffer (no copy). */
export interface TensorEntry {
  dtype: SafeDType;
  shape: number[];
  bytes: Uint8Array;
}

export interface ParsedSafetensors {
  tensors: Map<string, TensorEntry>;
  metadata: Record<string, string>;
}

/** Tensor data accepted by the writer; Uint16Array means raw bit patterns when the dtype is F16/BF16. */
export type TensorData =
  | Float32Array
  | Float64Array
  | Int32Array
  | Int16Array
  | Int8Array
  | Uint8Array
  | Uint16Array
  | BigInt64Array
  | number[];

export interface TensorInput {
  dtype: SafeDType;
  shape: readonly number[];
  data: TensorData;
}

/** Any problem with a safetensors file or with tensors handed to the writer. */
export class SafetensorsError extends Error {
  readonly fileName: string;
  constructor(fileName: string, problem: string) {
    super(`safetensors ${fileName}: ${problem}`);
    this.name = "SafetensorsError";
    this.fileName = fileName;
  }
}

const ITEM_SIZE: Record<SafeDType, number> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
};

const METADATA_KEY = "__metadata__";

// Typed-array views reinterpret bytes in host order; the format is little-endian. Every platform Deno
// ships for is little-endian, so refuse loudly rather than carry an untested byte-swapping path.
if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  throw new Error("safetensors.ts assumes a little-endian host");
}

export function isSafeDType(s: unknown): s is SafeDType {
  return typeof s === "string" && Object.hasOwn(ITEM_SIZE, s);
}

/** Bytes per element of a dtype. */
export function itemSize(dtype: SafeDType): number {
  return ITEM_SIZE[dtype];
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isNonNegInt(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

/** Product of the dims, or undefined if it leaves the exactly representable integers. */
function elementCount(shape: readonly number[]): number | undefined {
  let n = 1;
  for (const d of shape) {
    n *= d;
    if (!Number.isSafeInteger(n)) return undefined;
  }
  return n;
}

/** Parses and validates a whole safetensors file held in memory. `fileName` is used in error messages. */
export function parseSafetensors(buf: Uint8Array, fileName: string): ParsedSafetensors {
  const fail = (problem: string): never => {
    throw new SafetensorsError(fileName, problem);
  };
  if (buf.length < 8) fail(`file is ${buf.length} bytes, shorter than the 8-byte header length`);
  const headerLen = new DataView(buf.buffer, buf.byteOffset, 8).getBigUint64(0, true);
  if (headerLen > BigInt(buf.length - 8)) {
    fail(`header length ${headerLen} exceeds the ${buf.length - 8} bytes after the length field`);
  }
  const n = Number(headerLen);
  const data = buf.subarray(8 + n);

  let headerText: string;
  try {
    headerText = new TextDecoder("utf-8", { fatal: true }).decode(buf.subarray(8, 8 + n));
  } catch {
    return fail("header is not valid UTF-8");
  }
  let header: unknown;
  try {
    header = JSON.parse(headerText);
  } catch (e) {
    return fail(`header is not valid JSON (${(e as Error).message})`);
  }
  if (!isPlainObject(header)) return fail("header JSON is not an object");

  const metadata: Record<string, string> = {};
  const rawMeta = header[METADATA_KEY];
  if (rawMeta !== undefined) {
    if (!isPlainObject(rawMeta)) fail(`"${METADATA_KEY}" is not an object`);
    for (const [k, v] of Object.entries(rawMeta as Record<string, unknown>)) {
      if (typeof v !== "string") fail(`metadata value for "${k}" is ${JSON.stringify(v)}, not a string`);
      // defineProperty, not assignment: a key named "__proto__" must become data, not a prototype.
      Object.defineProperty(metadata, k, { value: v, enumerable: true, writable: true, configurable: true });
    }
  }

  const tensors = new Map<string, TensorEntry>();
  const spans: { name: string; begin: number; end: number }[] = [];
  for (const [name, info] of Object.entries(header)) {
    if (name === METADATA_KEY) continue;
    const where = `tensor "${name}"`;
    if (!isPlainObject(info)) return fail(`${where}: entry is not an object`);
    const { dtype, shape, data_offsets: offsets } = info;
    if (!isSafeDType(dtype)) return fail(`${where}: unknown dtype ${JSON.stringify(dtype)}`);
    if (!Array.isArray(shape) || !shape.every(isNonNegInt)) {
      return fail(`${where}: shape ${JSON.stringify(shape)} is not an array of non-negative integers`);
    }
    if (
      !Array.isArray(offsets) || offsets.length !== 2 || !isNonNegInt(offsets[0]) || !isNonNegInt(offsets[1])
    ) {
      return fail(`${where}: data_offsets ${JSON.stringify(offsets)} is not a pair of non-negative integers`);
    }
    const [begin, end] = offsets as [number, number];
    if (begin > end) fail(`${where}: data_offsets [${begin}, ${end}] has begin after end`);
    if (end > data.length) {
      fail(`${where}: data_offsets [${begin}, ${end}] run past the ${data.length}-byte data buffer`);
    }
    const count = elementCount(shape);
    const expected = count === undefined ? undefined : count * ITEM_SIZE[dtype];
    if (expected === undefined || !Number.isSafeInteger(expected)) {
      return fail(`${where}: shape ${JSON.stringify(shape)} is too large`);
    }
    if (end - begin !== expected) {
      fail(
        `${where}: data_offsets [${begin}, ${end}] span ${end - begin} bytes but ${dtype} ${
          JSON.stringify(shape)
        } needs ${expected}`,
      );
    }
    spans.push({ name, begin, end });
    tensors.set(name, { dtype, shape: shape.slice(), bytes: data.subarray(begin, end) });
  }

  // Overlap check: after sorting by start, each tensor must begin at or after the previous one's end.
  // Empty tensors occupy no bytes and cannot overlap anything.
  const occupied = spans.filter((s) => s.end > s.begin).sort((a, b) => a.begin - b.begin);
  for (let i = 1; i < occupied.length; i++) {
    const prev = occupied[i - 1];
    const cur = occupied[i];
    if (cur.begin < prev.end) {
      fail(
        `tensors "${prev.name}" [${prev.begin}, ${prev.end}] and "${cur.name}" [${cur.begin}, ${cur.end}] overlap`,
      );
    }
  }
  return { tensors, metadata };
}

/** Reads and parses a safetensors file; errors name `path`. */
export async function readSafetensorsFile(path: string): Promise<ParsedSafetensors> {
  return parseSafetensors(await Deno.readFile(path), path);
}

type TypedCtor<T> = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): T;
  readonly BYTES_PER_ELEMENT: number;
};

/** Views entry bytes as T in place when aligned, otherwise views an aligned copy. */
function viewAs<T>(bytes: Uint8Array, ctor: TypedCtor<T>): T {
  const size = ctor.BYTES_PER_ELEMENT;
  const src = bytes.byteOffset % size === 0 ? bytes : bytes.slice();
  return new ctor(src.buffer, src.byteOffset, src.length / size);
}

function decodeInto(entry: TensorEntry, out: Float64Array | Float32Array): void {
  const b = entry.bytes;
  switch (entry.dtype) {
    case "F64":
      out.set(viewAs(b, Float64Array));
      return;
    case "F32":
      out.set(viewAs(b, Float32Array));
      return;
    case "F16":
      decodeF16(viewAs(b, Uint16Array), out);
      return;
    case "BF16":
      decodeBF16(viewAs(b, Uint16Array), out);
      return;
    case "I64": {
      // Values beyond 2^53 lose precision here; checkpoints only hold small integers (ids, positions).
      const v = viewAs(b, BigInt64Array);
      for (let i = 0; i < v.length; i++) out[i] = Number(v[i]);
      return;
    }
    case "I32":
      out.set(viewAs(b, Int32Array));
      return;
    case "I16":
      out.set(viewAs(b, Int16Array));
      return;
    case "I8":
      out.set(new Int8Array(b.buffer, b.byteOffset, b.length));
      return;
    case "U8":
      out.set(b);
      return;
    case "BOOL":
      for (let i = 0; i < b.length; i++) out[i] = b[i] !== 0 ? 1 : 0;
      return;
  }
}

function checkEntry(entry: TensorEntry): number {
  const n = entry.bytes.length / ITEM_SIZE[entry.dtype];
  if (!Number.isInteger(n)) {
    throw new RangeError(`${entry.bytes.length} bytes is not a whole number of ${entry.dtype} elements`);
  }
  return n;
}

/** Decodes any dtype to a fresh Float64Array (never aliasing the file buffer). */
export function toFloat64(entry: TensorEntry): Float64Array<ArrayBuffer> {
  const out = new Float64Array(checkEntry(entry));
  decodeInto(entry, out);
  return out;
}

/** Decodes any dtype to a fresh Float32Array (values rounded to f32; never aliasing the file buffer). */
export function toFloat32(entry: TensorEntry): Float32Array<ArrayBuffer> {
  const out = new Float32Array(checkEntry(entry));
  decodeInto(entry, out);
  return out;
}

const INT_RANGE: Partial<Record<SafeDType, [number, number]>> = {
  I64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  I32: [-0x80000000, 0x7fffffff],
  I16: [-0x8000, 0x7fff],
  I8: [-0x80, 0x7f],
  U8: [0, 0xff],
  BOOL: [0, 1],
};

/**
 * Converts writer input to little-endian bytes of `dtype`. Floats round to nearest even (bf16 via f32,
 * see half.ts); integer dtypes reject non-integers and out-of-range values instead of wrapping, because
 * a silently wrapped index in a checkpoint is much harder to track down than an error here.
 */
function encodeData(name: string, t: TensorInput, count: number, fail: (p: string) => never): Uint8Array {
  const { dtype, data } = t;
  if (data.length !== count) {
    fail(
      `tensor "${name}": data has ${data.length} values but shape ${JSON.stringify(t.shape)} needs ${count}`,
    );
  }
  const bytesOf = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  if (data instanceof BigInt64Array) {
    if (dtype !== "I64") fail(`tensor "${name}": BigInt64Array data can only be written as I64`);
    return bytesOf(data);
  }
  switch (dtype) {
    case "F64":
      return bytesOf(new Float64Array(data));
    case "F32":
      return bytesOf(new Float32Array(data));
    case "F16":
      return bytesOf(data instanceof Uint16Array ? data : encodeF16(data));
    case "BF16":
      return bytesOf(data instanceof Uint16Array ? data : encodeBF16(data));
  }
  const [lo, hi] = INT_RANGE[dtype]!;
  for (let i = 0; i < data.length; i++) {
    const v = data[i];
    if (!Number.isInteger(v) || v < lo || v > hi) {
      fail(`tensor "${name}": value ${v} at index ${i} is not representable as ${dtype}`);
    }
  }
  switch (dtype) {
    case "I64": {
      const out = new BigInt64Array(count);
      for (let i = 0; i < count; i++) out[i] = BigInt(data[i]);
      return bytesOf(out);
    }
    case "I32":
      return bytesOf(new Int32Array(data));
    case "I16":
      return bytesOf(new Int16Array(data));
    case "I8":
      return bytesOf(new Int8Array(data));
    default: // U8, BOOL
      return bytesOf(new Uint8Array(data));
  }
}

function compareCodeUnits(a: string, b: string): number {
  // Not localeCompare: output must not depend on the machine's locale.
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Serializes tensors (and optional string metadata) to safetensors bytes. The same input always gives
 * byte-identical output. `fileName` only labels error messages.
 */
export function serializeSafetensors(
  tensors: Map<string, TensorInput> | Record<string, TensorInput>,
  metadata?: Record<string, string>,
  fileName = "<memory>",
): Uint8Array<ArrayBuffer> {
  const fail = (problem: string): never => {
    throw new SafetensorsError(fileName, problem);
  };
  const entries = tensors instanceof Map ? [...tensors.entries()] : Object.entries(tensors);

  const encoded: { name: string; dtype: SafeDType; shape: number[]; bytes: Uint8Array }[] = [];
  for (const [name, t] of entries) {
    if (name === METADATA_KEY) fail(`"${METADATA_KEY}" is reserved and cannot name a tensor`);
    if (!isSafeDType(t.dtype)) fail(`tensor "${name}": unknown dtype ${JSON.stringify(t.dtype)}`);
    if (!Array.isArray(t.shape) || !t.shape.every(isNonNegInt)) {
      fail(`tensor "${name}": shape ${JSON.stringify(t.shape)} is not an array of non-negative integers`);
    }
    const count = elementCount(t.shape);
    if (count === undefined) return fail(`tensor "${name}": shape ${JSON.stringify(t.shape)} is too large`);
    encoded.push({ name, dtype: t.dtype, shape: [...t.shape], bytes: encodeData(name, t, count, fail) });
  }
  if (metadata !== undefined) {
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== "string") fail(`metadata value for "${k}" is not a string`);
    }
  }

  // Data layout: larger elements first keeps every tensor aligned to its element size.
  const layout = [...encoded].sort((a, b) =>
    ITEM_SIZE[b.dtype] - ITEM_SIZE[a.dtype] || compareCodeUnits(a.name, b.name)
  );
  const offsets = new Map<string, [number, number]>();
  let dataLen = 0;
  for (const e of layout) {
    offsets.set(e.name, [dataLen, dataLen + e.bytes.length]);
    dataLen += e.bytes.length;
  }

  // Null-prototype objects so that a name like "__proto__" is stored as an ordinary key.
  const header: Record<string, unknown> = Object.create(null);
  if (metadata !== undefined && Object.keys(metadata).length > 0) {
    const sortedMeta: Record<string, string> = Object.create(null);
    for (const k of Object.keys(metadata).sort(compareCodeUnits)) sortedMeta[k] = metadata[k];
    header[METADATA_KEY] = sortedMeta;
  }
  for (const e of [...encoded].sort((a, b) => compareCodeUnits(a.name, b.name))) {
    header[e.name] = { dtype: e.dtype, shape: e.shape, data_offsets: offsets.get(e.name) };
  }

  const json = new TextEncoder().encode(JSON.stringify(header));
  const headerLen = Math.ceil(json.length / 8) * 8;
  const out = new Uint8Array(8 + headerLen + dataLen);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerLen), true);
  out.set(json, 8);
  out.fill(0x20, 8 + json.length, 8 + headerLen); // space padding is valid trailing JSON whitespace
  for (const e of layout) out.set(e.bytes, 8 + headerLen + offsets.get(e.name)![0]);
  return out;
}

/**
 * Serializes and writes atomically: the bytes go to a sibling temporary file that is flushed to disk
 * and then renamed over `path`, so a crash never leaves a half-written checkpoint under the real name.
 */
export async function writeSafetensorsFile(
  path: string,
  tensors: Map<string, TensorInput> | Record<string, TensorInput>,
  metadata?: Record<string, string>,
): Promise<void> {
  const bytes = serializeSafetensors(tensors, metadata, path);
  const tmp = `${path}.tmp-${Deno.pid}`;
  try {
    const file = await Deno.open(tmp, { write: true, create: true, truncate: true });
    try {
      for (let off = 0; off < bytes.length;) off += await file.write(bytes.subarray(off));
      await file.sync();
    } finally {
      file.close();
    }
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
}
