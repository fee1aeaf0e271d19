/**
 * Building shards in memory and writing them atomically. A shard is written to a temporary file in the
 * same directory and renamed into place, so a reader sees either no file or a complete one, and a failed
 * run leaves nothing half-written behind.
 */
import { basename, dirname, join } from "node:path";
import { crc32 } from "./crc32.ts";
import { encodeHeader, type RecordLayout } from "./format.ts";
import { encodeRecord, type RecordFields, type Views, viewsOf } from "./record.ts";

/** A growable array of fixed-size records. */
export class RecordBuffer {
  count = 0;
  private bytes: Uint8Array;
  private views: Views;

  constructor(readonly layout: RecordLayout, readonly padId: number, initialRecords = 1024) {
    this.bytes = new Uint8Array(layout.recordSize * Math.max(1, initialRecords));
    this.views = viewsOf(this.bytes);
  }

  append(...f: RecordFields): void {
    const R = this.layout.recordSize;
    if ((this.count + 1) * R > this.bytes.length) {
      const grown = new Uint8Array(this.bytes.length * 2);
      grown.set(this.bytes);
      this.bytes = grown;
      this.views = viewsOf(grown);
    }
    encodeRecord(this.views, this.layout, this.count * R, this.padId, ...f);
    this.count++;
  }

  /** The records so far, in order (a view, not a copy). */
  payload(): Uint8Array {
    return this.bytes.subarray(0, this.count * this.layout.recordSize);
  }

  /** The records in the order `order` gives (record order[k] goes to slot k), as a new buffer. */
  permuted(order: ArrayLike<number>): Uint8Array {
    const W = this.layout.recordSize >>> 2; // records are whole 32-bit words
    const out = new Uint8Array(this.count * W * 4);
    const dst = new Int32Array(out.buffer), src = this.views.i32;
    for (let k = 0; k < this.count; k++) {
      const from = order[k] * W, to = k * W;
      for (let w = 0; w < W; w++) dst[to + w] = src[from + w];
    }
    return out;
  }
}

export interface ShardMeta {
  vocabSize: number;
  padId: number;
}

export interface WrittenShard {
  records: number;
  bytes: number;
  crc32: number;
}

/** The complete bytes of a shard: header then payload. */
export function shardBytes(layout: RecordLayout, meta: ShardMeta, payload: Uint8Array): Uint8Array[] {
  const records = payload.length / layout.recordSize;
  if (!Number.isInteger(records)) throw new Error("shard payload is not a whole number of records");
  const header = encodeHeader({
    recordCount: records,
    recordSize: layout.recordSize,
    seqLength: layout.seqLength,
    maxPredictions: layout.maxPredictions,
    vocabSize: meta.vocabSize,
    padId: meta.padId,
    payloadCrc32: crc32(payload),
    fields: layout.fields,
  });
  return [header, payload];
}

export async function writeShard(
  path: string,
  layout: RecordLayout,
  meta: ShardMeta,
  payload: Uint8Array,
): Promise<WrittenShard> {
  const parts = shardBytes(layout, meta, payload);
  await writeFileAtomic(path, parts);
  return {
    records: payload.length / layout.recordSize,
    bytes: parts[0].length + payload.length,
    crc32: new DataView(parts[0].buffer).getUint32(48, true),
  };
}

/**
 * Writes `chunks` to a temporary file next to `path`, then renames it to `path`. On any error (including
 * one thrown by the chunk source) the temporary file is removed. The rename makes a crashed or failed
 * process leave no partial file. `durable` also flushes the data to disk before the rename, against power
 * loss; shards do without it (it costs more than making them), because their checksums catch that case.
 */
export async function writeFileAtomic(
  path: string,
  chunks: Iterable<Uint8Array> | AsyncIterable<Uint8Array>,
  opts: { durable?: boolean } = {},
): Promise<void> {
  const tag = crypto.getRandomValues(new Uint32Array(1))[0].toString(16);
  const tmp = join(dirname(path), `.${basename(path)}.tmp-${Deno.pid}-${tag}`);
  const file = await Deno.open(tmp, { write: true, createNew: true });
  let ok = false;
  try {
    for await (const chunk of chunks) {
      for (let done = 0; done < chunk.length;) done += await file.write(chunk.subarray(done));
    }
    if (opts.durable) await file.syncData();
    ok = true;
  } finally {
    file.close();
    if (!ok) await Deno.remove(tmp).catch(() => {});
  }
  try {
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
}

/** Temporary files writeFileAtomic leaves only if the process dies mid-write (callers may sweep them). */
export function isTempName(name: string): boolean {
  return /^\..+\.tmp-\d+-[0-9a-f]+$/.test(name);
}
