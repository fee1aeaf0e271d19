/**
 * Reading shard files: the header is parsed and checked on open (magic, version, header checksum, schema,
 * and the file size against record_count), records are read on demand by seeking, never the whole file.
 */
import { crc32, crcHex } from "./crc32.ts";
import { ShardError } from "./errors.ts";
import {
  decodeHeader,
  FIXED_HEADER_BYTES,
  layoutFromHeader,
  peekHeaderSize,
  type RecordLayout,
  type ShardHeader,
} from "./format.ts";
import { decodeRecord, type Instance, recordProblem, viewsOf } from "./record.ts";

export class ShardFile {
  private constructor(
    readonly path: string,
    private file: Deno.FsFile,
    readonly header: ShardHeader,
    readonly layout: RecordLayout,
  ) {}

  get recordCount(): number {
    return this.header.recordCount;
  }

  /** Opens and validates a shard; `verify` also checks the payload checksum (one streaming pass). */
  static open(path: string, opts: { verify?: boolean } = {}): ShardFile {
    let file: Deno.FsFile;
    try {
      file = Deno.openSync(path, { read: true });
    } catch (e) {
      throw new ShardError(path, e instanceof Deno.errors.NotFound ? "file not found" : (e as Error).message);
    }
    try {
      const size = file.statSync().size;
      const fixed = readFully(file, path, 0, new Uint8Array(Math.min(size, FIXED_HEADER_BYTES)));
      const headerSize = peekHeaderSize(fixed, path);
      if (size < headerSize) {
        throw new ShardError(
          path,
          `truncated header: the file has ${size} bytes, the header ${headerSize}`,
          size,
        );
      }
      const header = decodeHeader(readFully(file, path, 0, new Uint8Array(headerSize)), path);
      const layout = layoutFromHeader(header, path);
      const expected = headerSize + header.recordCount * header.recordSize;
      if (size < expected) {
        const whole = Math.floor((size - headerSize) / header.recordSize);
        throw new ShardError(
          path,
          `truncated: ${size} bytes, expected ${expected} (${header.recordCount} records of ${header.recordSize} bytes after a ${headerSize}-byte header); record ${whole} is incomplete`,
          size,
        );
      }
      if (size > expected) {
        throw new ShardError(path, `${size - expected} unexpected bytes after the last record`, expected);
      }
      const shard = new ShardFile(path, file, header, layout);
      if (opts.verify) shard.verifyChecksum();
      return shard;
    } catch (e) {
      file.close();
      throw e;
    }
  }

  /** Recomputes the payload CRC in 4 MiB pieces; a mismatch means the records were changed on disk. */
  verifyChecksum(): void {
    const { headerSize, recordCount, recordSize, payloadCrc32 } = this.header;
    const total = recordCount * recordSize;
    const piece = new Uint8Array(Math.min(total, 4 << 20));
    let crc = 0;
    for (let done = 0; done < total;) {
      const n = Math.min(piece.length, total - done);
      crc = crc32(readFully(this.file, this.path, headerSize + done, piece.subarray(0, n)), crc);
      done += n;
    }
    if (crc !== payloadCrc32) {
      throw new ShardError(
        this.path,
        `payload checksum mismatch: crc32 ${crcHex(crc)}, header says ${
          crcHex(payloadCrc32)
        } (the records are corrupt)`,
        headerSize,
      );
    }
  }

  /** File offset of record i. */
  offsetOf(i: number): number {
    return this.header.headerSize + i * this.header.recordSize;
  }

  /** Reads `count` consecutive records from record `first` into `into` (which must hold them). */
  readRecords(first: number, count: number, into: Uint8Array): Uint8Array {
    if (first < 0 || count < 0 || first + count > this.recordCount) {
      throw new RangeError(
        `records ${first}..${first + count} outside 0..${this.recordCount} of ${this.path}`,
      );
    }
    return readFully(
      this.file,
      this.path,
      this.offsetOf(first),
      into.subarray(0, count * this.header.recordSize),
    );
  }

  /** Checks the record at byte `base` of `bytes` (read from record `index`); throws naming file and offset. */
  check(bytes: Uint8Array, base: number, index: number): void {
    const problem = recordProblem(viewsOf(bytes), this.layout, base, this.header.vocabSize);
    if (problem) throw new ShardError(this.path, `record ${index}: ${problem}`, this.offsetOf(index));
  }

  /** Record i, checked and decoded into plain arrays (for dumps and tests; the loader decodes in place). */
  instance(i: number, scratch = new Uint8Array(this.header.recordSize)): Instance {
    this.readRecords(i, 1, scratch);
    this.check(scratch, 0, i);
    return decodeRecord(viewsOf(scratch), this.layout, 0);
  }

  close(): void {
    this.file.close();
  }
}

/** Reads exactly into.length bytes at `offset` (reads may return short counts); EOF is an error. */
export function readFully(file: Deno.FsFile, path: string, offset: number, into: Uint8Array): Uint8Array {
  file.seekSync(offset, Deno.SeekMode.Start);
  let done = 0;
  while (done < into.length) {
    const n = file.readSync(into.subarray(done));
    if (n === null || n === 0) {
      throw new ShardError(
        path,
        `unexpected end of file (wanted ${into.length - done} more bytes)`,
        offset + done,
      );
    }
    done += n;
  }
  return into;
}
