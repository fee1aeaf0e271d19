/**
 * The shard file format, version 1 (docs/shard-format.md is the prose version of this file).
 *
 * A shard is a header followed by fixed-size records, so a reader can seek to record i at
 * header_size + i * record_size without an index. All integers are little-endian.
 *
 * Header: 64 fixed bytes, then a field table of 32-byte entries, zero-padded to a multiple of 64.
 *   0  magic "BFSHARD\0"        8 bytes
 *   8  format version           u32 (1)
 *  12  header_size              u32 (bytes before the first record; a multiple of 64)
 *  16  record_count             u64
 *  24  record_size              u32 (a multiple of 4)
 *  28  max_seq_length           u32
 *  32  max_predictions_per_seq  u32
 *  36  vocab_size               u32
 *  40  pad_id                   u32 (input_ids past num_tokens hold it)
 *  44  field_count              u32
 *  48  payload_crc32            u32 (CRC-32/IEEE of all record bytes)
 *  52  header_crc32             u32 (CRC-32 of the header_size header bytes with this field zeroed)
 *  56  reserved                 8 zero bytes
 *  64  field entries: name (20 bytes ASCII, NUL-padded), dtype u8 (1 u8, 2 u16, 3 i32), 3 zero bytes,
 *      count u32 (elements), offset u32 (byte offset inside the record)
 *
 * The record stores what the model's six inputs are derived from, compactly (ids are u16 when the
 * vocabulary fits, which makes a record about a quarter of its int32 size):
 *   input_ids            [S]  masked tokens of [CLS] A [SEP] B [SEP], then pad_id
 *   masked_lm_ids        [P]  original ids at the masked positions, then 0
 *   masked_lm_positions  [P]  u16, ascending, then 0
 *   num_tokens           u16  length before padding (attention_mask is 1 below it)
 *   segment_b_start      u16  index of B's first token (token_type_ids is 1 from here to num_tokens)
 *   num_masked           u16  valid entries of the two masked_lm arrays
 *   next_sentence_label  u8   1 when B is a random segment (Hugging Face's convention)
 */
import { crc32 } from "./crc32.ts";
import { ShardError } from "./errors.ts";

export const MAGIC = new Uint8Array([0x42, 0x46, 0x53, 0x48, 0x41, 0x52, 0x44, 0x00]); // "BFSHARD\0"
export const FORMAT_VERSION = 1;
export const FIXED_HEADER_BYTES = 64;
export const FIELD_ENTRY_BYTES = 32;
const FIELD_NAME_BYTES = 20;
/** Positions and lengths are u16. */
export const MAX_SEQ_LENGTH_LIMIT = 65535;

export type FieldDType = "u8" | "u16" | "i32";
const DTYPE_CODE: Record<FieldDType, number> = { u8: 1, u16: 2, i32: 3 };
const CODE_DTYPE: Record<number, FieldDType> = { 1: "u8", 2: "u16", 3: "i32" };
export const DTYPE_BYTES: Record<FieldDType, number> = { u8: 1, u16: 2, i32: 4 };

export interface FieldSpec {
  name: string;
  dtype: FieldDType;
  count: number;
  offset: number;
}

/** Byte offsets of the v1 fields inside a record, plus the id dtype; what writer and readers index by. */
export interface RecordLayout {
  seqLength: number;
  maxPredictions: number;
  idDtype: "u16" | "i32";
  recordSize: number;
  fields: FieldSpec[];
  inputIds: number;
  maskedLmIds: number;
  maskedLmPositions: number;
  numTokens: number;
  segmentBStart: number;
  numMasked: number;
  nextSentenceLabel: number;
}

export interface ShardHeader {
  version: number;
  headerSize: number;
  recordCount: number;
  recordSize: number;
  seqLength: number;
  maxPredictions: number;
  vocabSize: number;
  padId: number;
  payloadCrc32: number;
  headerCrc32: number;
  fields: FieldSpec[];
}

/** The v1 layout for the given sizes: fields by decreasing element size, so each is aligned. */
export function recordLayout(seqLength: number, maxPredictions: number, vocabSize: number): RecordLayout {
  const idDtype = vocabSize <= 65536 ? "u16" : "i32";
  const order: [string, FieldDType, number][] = [
    ["input_ids", idDtype, seqLength],
    ["masked_lm_ids", idDtype, maxPredictions],
    ["masked_lm_positions", "u16", maxPredictions],
    ["num_tokens", "u16", 1],
    ["segment_b_start", "u16", 1],
    ["num_masked", "u16", 1],
    ["next_sentence_label", "u8", 1],
  ];
  // Sorting by element size (stable) keeps every field aligned to its size when the record is.
  order.sort((x, y) => DTYPE_BYTES[y[1]] - DTYPE_BYTES[x[1]]);
  const fields: FieldSpec[] = [];
  let offset = 0;
  for (const [name, dtype, count] of order) {
    fields.push({ name, dtype, count, offset });
    offset += DTYPE_BYTES[dtype] * count;
  }
  return layoutFromFields(seqLength, maxPredictions, alignUp(offset, 4), fields, idDtype);
}

function layoutFromFields(
  seqLength: number,
  maxPredictions: number,
  recordSize: number,
  fields: FieldSpec[],
  idDtype: "u16" | "i32",
): RecordLayout {
  const at = (name: string) => fields.find((f) => f.name === name)!.offset;
  return {
    seqLength,
    maxPredictions,
    idDtype,
    recordSize,
    fields,
    inputIds: at("input_ids"),
    maskedLmIds: at("masked_lm_ids"),
    maskedLmPositions: at("masked_lm_positions"),
    numTokens: at("num_tokens"),
    segmentBStart: at("segment_b_start"),
    numMasked: at("num_masked"),
    nextSentenceLabel: at("next_sentence_label"),
  };
}

export function alignUp(n: number, a: number): number {
  return Math.ceil(n / a) * a;
}

export function headerSizeFor(fieldCount: number): number {
  return alignUp(FIXED_HEADER_BYTES + FIELD_ENTRY_BYTES * fieldCount, 64);
}

export function encodeHeader(h: Omit<ShardHeader, "version" | "headerSize" | "headerCrc32">): Uint8Array {
  const size = headerSizeFor(h.fields.length);
  const buf = new Uint8Array(size);
  const dv = new DataView(buf.buffer);
  buf.set(MAGIC, 0);
  dv.setUint32(8, FORMAT_VERSION, true);
  dv.setUint32(12, size, true);
  dv.setBigUint64(16, BigInt(h.recordCount), true);
  dv.setUint32(24, h.recordSize, true);
  dv.setUint32(28, h.seqLength, true);
  dv.setUint32(32, h.maxPredictions, true);
  dv.setUint32(36, h.vocabSize, true);
  dv.setUint32(40, h.padId, true);
  dv.setUint32(44, h.fields.length, true);
  dv.setUint32(48, h.payloadCrc32, true);
  h.fields.forEach((f, i) => {
    const at = FIXED_HEADER_BYTES + i * FIELD_ENTRY_BYTES;
    if (f.name.length > FIELD_NAME_BYTES || !/^[\x21-\x7e]+$/.test(f.name)) {
      throw new Error(`shard field name '${f.name}' is not 1..20 printable ASCII characters`);
    }
    for (let k = 0; k < f.name.length; k++) buf[at + k] = f.name.charCodeAt(k);
    buf[at + FIELD_NAME_BYTES] = DTYPE_CODE[f.dtype];
    dv.setUint32(at + 24, f.count, true);
    dv.setUint32(at + 28, f.offset, true);
  });
  dv.setUint32(52, crc32(buf), true); // computed while the field itself is still zero
  return buf;
}

/** Reads the fixed part; enough to learn header_size (which the caller then reads in full). */
export function peekHeaderSize(fixed: Uint8Array, file: string): number {
  if (fixed.length < FIXED_HEADER_BYTES) {
    throw new ShardError(file, `truncated header: ${fixed.length} bytes, a header needs at least 64`, 0);
  }
  for (let i = 0; i < MAGIC.length; i++) {
    if (fixed[i] !== MAGIC[i]) throw new ShardError(file, "not a bertfuse shard (bad magic)", 0);
  }
  const dv = new DataView(fixed.buffer, fixed.byteOffset, fixed.byteLength);
  const version = dv.getUint32(8, true);
  if (version !== FORMAT_VERSION) {
    throw new ShardError(file, `format version ${version} is not supported (this reader knows 1)`, 8);
  }
  const size = dv.getUint32(12, true);
  const fieldCount = dv.getUint32(44, true);
  if (fieldCount > 1024 || size !== headerSizeFor(fieldCount)) {
    throw new ShardError(file, `corrupt header: header_size ${size} with ${fieldCount} fields`, 12);
  }
  return size;
}

/** Parses and validates a complete header (`bytes` holds at least header_size bytes). */
export function decodeHeader(bytes: Uint8Array, file: string): ShardHeader {
  const headerSize = peekHeaderSize(bytes, file);
  if (bytes.length < headerSize) {
    throw new ShardError(file, `truncated header: ${bytes.length} of ${headerSize} bytes`, bytes.length);
  }
  const head = bytes.slice(0, headerSize);
  const dv = new DataView(head.buffer);
  const headerCrc32 = dv.getUint32(52, true);
  dv.setUint32(52, 0, true);
  if (crc32(head) !== headerCrc32) {
    throw new ShardError(file, "header checksum mismatch (the header is corrupt)", 0);
  }
  const count = dv.getBigUint64(16, true);
  if (count > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new ShardError(file, `corrupt header: record_count ${count}`, 16);
  }
  const h: ShardHeader = {
    version: dv.getUint32(8, true),
    headerSize,
    recordCount: Number(count),
    recordSize: dv.getUint32(24, true),
    seqLength: dv.getUint32(28, true),
    maxPredictions: dv.getUint32(32, true),
    vocabSize: dv.getUint32(36, true),
    padId: dv.getUint32(40, true),
    payloadCrc32: dv.getUint32(48, true),
    headerCrc32,
    fields: [],
  };
  const fieldCount = dv.getUint32(44, true);
  for (let i = 0; i < fieldCount; i++) {
    const at = FIXED_HEADER_BYTES + i * FIELD_ENTRY_BYTES;
    let name = "";
    for (let k = 0; k < FIELD_NAME_BYTES && head[at + k] !== 0; k++) {
      name += String.fromCharCode(head[at + k]);
    }
    const dtype = CODE_DTYPE[head[at + FIELD_NAME_BYTES]];
    if (dtype === undefined) {
      throw new ShardError(file, `field '${name}' has unknown dtype code ${head[at + FIELD_NAME_BYTES]}`, at);
    }
    h.fields.push({ name, dtype, count: dv.getUint32(at + 24, true), offset: dv.getUint32(at + 28, true) });
  }
  return h;
}

/** Checks the header's schema against v1 and returns the layout readers index by. */
export function layoutFromHeader(h: ShardHeader, file: string): RecordLayout {
  const bad = (problem: string): never => {
    throw new ShardError(file, `schema: ${problem}`);
  };
  const S = h.seqLength, P = h.maxPredictions;
  if (S < 5 || S > MAX_SEQ_LENGTH_LIMIT) bad(`max_seq_length ${S} is outside 5..${MAX_SEQ_LENGTH_LIMIT}`);
  if (P < 1 || P > S) bad(`max_predictions_per_seq ${P} is outside 1..max_seq_length`);
  if (h.vocabSize < 5) bad(`vocab_size ${h.vocabSize} is too small`);
  if (h.recordSize === 0 || h.recordSize % 4 !== 0) bad(`record_size ${h.recordSize} is not a multiple of 4`);
  const ids = h.fields.find((f) => f.name === "input_ids");
  const idDtype = ids?.dtype === "u16" || ids?.dtype === "i32"
    ? ids.dtype
    : bad("input_ids must be u16 or i32");
  if (idDtype === "u16" && h.vocabSize > 65536) bad(`u16 ids cannot hold vocab_size ${h.vocabSize}`);
  const want: Record<string, [FieldDType, number]> = {
    input_ids: [idDtype, S],
    masked_lm_ids: [idDtype, P],
    masked_lm_positions: ["u16", P],
    num_tokens: ["u16", 1],
    segment_b_start: ["u16", 1],
    num_masked: ["u16", 1],
    next_sentence_label: ["u8", 1],
  };
  const spans: [number, number, string][] = [];
  for (const f of h.fields) {
    const size = DTYPE_BYTES[f.dtype];
    if (f.offset % size !== 0 || f.offset + size * f.count > h.recordSize) {
      bad(
        `field '${f.name}' (offset ${f.offset}, ${f.count} x ${f.dtype}) does not fit a ${h.recordSize}-byte record aligned`,
      );
    }
    spans.push([f.offset, f.offset + size * f.count, f.name]);
  }
  spans.sort((a, b) => a[0] - b[0]);
  for (let i = 1; i < spans.length; i++) {
    if (spans[i][0] < spans[i - 1][1]) bad(`fields '${spans[i - 1][2]}' and '${spans[i][2]}' overlap`);
  }
  for (const [name, [dtype, count]] of Object.entries(want)) {
    const f = h.fields.find((x) => x.name === name);
    if (!f) bad(`missing field '${name}'`);
    else if (f.dtype !== dtype || f.count !== count) {
      bad(`field '${name}' is ${f.count} x ${f.dtype}, expected ${count} x ${dtype}`);
    }
  }
  return layoutFromFields(S, P, h.recordSize, h.fields, idDtype);
}
