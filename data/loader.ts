/**
 * The pretraining data loader: streams records from the shards of a prepare-data directory and yields
 * batches of the model's six inputs (loader_batch.ts).
 *
 * - Streaming: records are read from the files on demand (one seek and read each); nothing is loaded
 *   whole. Shard headers and checksums are checked when the loader opens.
 * - Shuffling: every epoch visits all records in the order of a seeded pseudo-random permutation keyed
 *   by (seed, epoch) (loader_permutation.ts), across shards, not only within them.
 * - Resume: the position is (epoch, position in the epoch). state() returns it as JSON-serializable data;
 *   Loader.open(dir, {state}) continues exactly there, also with another batch size.
 * - Epochs wrap: a batch that reaches the end of an epoch takes its remaining rows from the next one.
 */
import { join } from "node:path";
import { allocBatch, type Batch, fillRow } from "./loader_batch.ts";
import { EpochPermutation } from "./loader_permutation.ts";
import { crc32, crcHex } from "./shards/crc32.ts";
import { DataError, ShardError } from "./shards/errors.ts";
import type { RecordLayout } from "./shards/format.ts";
import { type Manifest, readManifest } from "./shards/manifest.ts";
import { ShardFile } from "./shards/reader.ts";
import { type Views, viewsOf } from "./shards/record.ts";

export type { Batch } from "./loader_batch.ts";

/** Where a loader stands; everything needed to continue exactly, as plain JSON. */
export interface LoaderState {
  version: 1;
  seed: number;
  shuffle: boolean;
  epoch: number;
  /** Records of this epoch already delivered. */
  position: number;
  /** Identifies the shard set (record count and shard checksums), so a state is not applied elsewhere. */
  fingerprint: string;
}

export interface LoaderOptions {
  batchSize: number;
  /** Seed of the shuffle (default 0); taken from `state` when resuming. */
  seed?: number;
  /** Default true; false reads the records in shard order. */
  shuffle?: boolean;
  /** Continue from a state() of an earlier loader over the same directory. */
  state?: LoaderState;
  /** Check every shard's payload checksum on open (default true; one pass over the files). */
  verify?: boolean;
  /** Only the manifest's shards [from, to) (default all): a run keeps its held-out shard out (heldout.ts). */
  shardRange?: readonly [number, number];
}

export class Loader {
  readonly batchSize: number;
  readonly seqLength: number;
  readonly maxPredictions: number;
  /** Records in one epoch. */
  readonly records: number;
  private epochNow: number;
  private positionNow: number;
  private perm: EpochPermutation | undefined;
  private permEpoch = -1;
  private readonly starts: number[];
  private readonly staging: Uint8Array;
  private readonly views: Views;
  private readonly layout: RecordLayout;
  private closed = false;

  private constructor(
    readonly dir: string,
    readonly manifest: Manifest,
    private readonly shards: ShardFile[],
    private readonly seed: number,
    private readonly shuffle: boolean,
    private readonly fingerprint: string,
    batchSize: number,
    epoch: number,
    position: number,
  ) {
    this.batchSize = batchSize;
    this.layout = shards[0].layout;
    this.seqLength = this.layout.seqLength;
    this.maxPredictions = this.layout.maxPredictions;
    this.starts = [0];
    for (const s of shards) this.starts.push(this.starts[this.starts.length - 1] + s.recordCount);
    this.records = this.starts[shards.length];
    this.staging = new Uint8Array(batchSize * this.layout.recordSize);
    this.views = viewsOf(this.staging);
    this.epochNow = epoch;
    this.positionNow = position;
  }

  static async open(dir: string, opts: LoaderOptions): Promise<Loader> {
    const { batchSize, state } = opts;
    if (!Number.isInteger(batchSize) || batchSize < 1) {
      throw new DataError(`batch size must be a positive integer`);
    }
    const manifest = await readManifest(dir);
    const shards: ShardFile[] = [];
    try {
      for (const entry of manifest.shards.slice(...(opts.shardRange ?? []))) {
        const shard = ShardFile.open(join(dir, entry.file), { verify: opts.verify ?? true });
        shards.push(shard);
        const h = shard.header;
        if (h.recordCount !== entry.records) {
          throw new ShardError(
            shard.path,
            `has ${h.recordCount} records, the manifest says ${entry.records}`,
            16,
          );
        }
        if (
          h.seqLength !== manifest.max_seq_length || h.maxPredictions !== manifest.max_predictions_per_seq
        ) {
          throw new ShardError(
            shard.path,
            `is for sequences of ${h.seqLength} with ${h.maxPredictions} predictions, the manifest says ${manifest.max_seq_length} and ${manifest.max_predictions_per_seq}`,
          );
        }
        if (h.vocabSize !== manifest.vocab_size) {
          throw new ShardError(
            shard.path,
            `vocab_size ${h.vocabSize}, the manifest says ${manifest.vocab_size}`,
            36,
          );
        }
      }
      const records = shards.reduce((n, s) => n + s.recordCount, 0);
      if (records === 0) throw new DataError(`${dir}: the shards hold no records`);
      const fingerprint = fingerprintOf(shards);
      let seed = opts.seed ?? 0, shuffle = opts.shuffle ?? true, epoch = 0, position = 0;
      if (state) {
        checkState(state, dir, fingerprint, records);
        if (opts.seed !== undefined && opts.seed !== state.seed) {
          throw new DataError(`loader state has seed ${state.seed}, but seed ${opts.seed} was asked for`);
        }
        ({ seed, shuffle, epoch, position } = state);
      }
      if (!Number.isSafeInteger(seed) || seed < 0) {
        throw new DataError(`loader seed must be a non-negative integer`);
      }
      return new Loader(dir, manifest, shards, seed, shuffle, fingerprint, batchSize, epoch, position);
    } catch (e) {
      for (const s of shards) s.close();
      throw e;
    }
  }

  /** Epochs completed so far. */
  get epoch(): number {
    return this.epochNow;
  }

  /** Records of the current epoch already delivered. */
  get position(): number {
    return this.positionNow;
  }

  /** The next batch; pass `into` to reuse arrays (they must have this loader's sizes). */
  next(into?: Batch): Batch {
    if (this.closed) throw new Error("loader is closed");
    const B = this.batchSize, R = this.layout.recordSize;
    const batch = into ?? allocBatch(B, this.seqLength, this.maxPredictions);
    if (
      batch.batchSize !== B || batch.seqLength !== this.seqLength ||
      batch.maxPredictions !== this.maxPredictions
    ) {
      throw new RangeError("batch arrays do not match the loader's sizes");
    }
    for (let row = 0; row < B; row++) {
      if (this.positionNow === this.records) {
        this.epochNow++;
        this.positionNow = 0;
      }
      const g = this.recordAt(this.positionNow);
      const shardIndex = this.shardOf(g);
      const shard = this.shards[shardIndex];
      const local = g - this.starts[shardIndex];
      shard.readRecords(local, 1, this.staging.subarray(row * R));
      shard.check(this.staging, row * R, local);
      this.positionNow++;
    }
    // Rows are filled after all reads so a corrupt record fails before any array is half-written.
    for (let row = 0; row < B; row++) fillRow(batch, row, this.views, this.layout, row * R);
    return batch;
  }

  state(): LoaderState {
    return {
      version: 1,
      seed: this.seed,
      shuffle: this.shuffle,
      epoch: this.epochNow,
      position: this.positionNow,
      fingerprint: this.fingerprint,
    };
  }

  /** Batches forever (epochs wrap). */
  *[Symbol.iterator](): Iterator<Batch> {
    while (true) yield this.next();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.shards) s.close();
  }

  private recordAt(position: number): number {
    if (!this.shuffle) return position;
    if (this.perm === undefined || this.permEpoch !== this.epochNow) {
      this.perm = new EpochPermutation(this.records, this.seed, this.epochNow);
      this.permEpoch = this.epochNow;
    }
    return this.perm.at(position);
  }

  private shardOf(g: number): number {
    let lo = 0, hi = this.shards.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.starts[mid] <= g) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
}

function fingerprintOf(shards: ShardFile[]): string {
  const text = shards.map((s) => `${s.recordCount}:${crcHex(s.header.payloadCrc32)}`).join(",");
  return `${shards.reduce((n, s) => n + s.recordCount, 0)}-${crcHex(crc32(new TextEncoder().encode(text)))}`;
}

function checkState(s: LoaderState, dir: string, fingerprint: string, records: number): void {
  const bad = (what: string): never => {
    throw new DataError(`loader state for ${dir}: ${what}`);
  };
  if (s?.version !== 1) bad("not a version 1 loader state");
  if (s.fingerprint !== fingerprint) {
    bad(`it was saved for another shard set (fingerprint ${s.fingerprint}, this one is ${fingerprint})`);
  }
  if (!Number.isSafeInteger(s.epoch) || s.epoch < 0) bad(`epoch ${s.epoch} is not a count`);
  if (!Number.isSafeInteger(s.position) || s.position < 0 || s.position > records) {
    bad(`position ${s.position} is outside 0..${records}`);
  }
  if (typeof s.shuffle !== "boolean") bad("shuffle is not a boolean");
}
