/**
 * Dynamic batching. Sequences wait in one queue per bucket; a batch starts when its bucket holds
 * `maxBatch` sequences, or when its oldest sequence has waited `maxDelayMs`, whichever comes first. One
 * batch runs at a time (a backend holds one executor per shape and is not re-entrant), and while it runs
 * new sequences gather, so under load batches fill even with a delay of 0. Among ready buckets the one
 * whose oldest sequence has waited longest goes first, so no bucket starves.
 *
 * The queue is bounded: past `maxQueue` waiting sequences a submission is refused with 503 at once,
 * rather than queueing work whose answer would come too late to matter.
 */
import type { EncodedRow } from "../model_io/infer_input.ts";
import { HttpError } from "./http_error.ts";
import type { ServeMetrics } from "./metrics.ts";
import type { RowOutputs } from "./served_model.ts";

export interface BatcherOptions {
  maxBatch: number;
  maxDelayMs: number;
  maxQueue: number;
  /** Runs one batch: all rows share `bucket`; returns each row's outputs in order. */
  run: (rows: EncodedRow[], bucket: number) => Promise<RowOutputs[]>;
  metrics?: ServeMetrics;
}

interface Pending {
  row: EncodedRow;
  enqueued: number;
  resolve: (o: RowOutputs) => void;
  reject: (e: unknown) => void;
}

export class Batcher {
  private queues = new Map<number, Pending[]>();
  private waiting = 0;
  private busy = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private idle: (() => void)[] = [];

  constructor(private opts: BatcherOptions) {}

  /** Sequences waiting now (not counting the batch that is running). */
  get depth(): number {
    return this.waiting;
  }

  /**
   * Queues the sequences of one request, all or none: a request never has half its sequences computed
   * and the rest refused.
   */
  submit(items: readonly { row: EncodedRow; bucket: number }[]): Promise<RowOutputs>[] {
    if (this.waiting + items.length > this.opts.maxQueue) {
      const e = new HttpError(
        503,
        `server busy: ${this.waiting} sequences queued, ${items.length} more would pass the limit of ${this.opts.maxQueue}`,
        { "retry-after": "1" },
        true,
      );
      return items.map(() => Promise.reject(e));
    }
    const promises = items.map(({ row, bucket }) =>
      new Promise<RowOutputs>((resolve, reject) => {
        let q = this.queues.get(bucket);
        if (!q) this.queues.set(bucket, q = []);
        q.push({ row, enqueued: performance.now(), resolve, reject });
      })
    );
    this.waiting += items.length;
    this.setDepth();
    this.schedule();
    return promises;
  }

  /** Resolves once nothing is queued or running (for a drain on shutdown). */
  drained(): Promise<void> {
    if (!this.busy && this.waiting === 0) return Promise.resolve();
    return new Promise((r) => this.idle.push(r));
  }

  private setDepth() {
    if (this.opts.metrics) this.opts.metrics.queueDepth.value = this.waiting;
  }

  /** Starts the next ready batch if none is running, else arms a timer for the earliest deadline. */
  private schedule(): void {
    if (this.busy) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    const now = performance.now();
    let pick: number | undefined, pickAge = -1, nextDeadline = Infinity;
    for (const [bucket, q] of this.queues) {
      if (q.length === 0) continue;
      const age = now - q[0].enqueued;
      const ready = q.length >= this.opts.maxBatch || age >= this.opts.maxDelayMs;
      if (ready && age > pickAge) [pick, pickAge] = [bucket, age];
      if (!ready) nextDeadline = Math.min(nextDeadline, q[0].enqueued + this.opts.maxDelayMs);
    }
    if (pick !== undefined) {
      void this.runBatch(pick);
      return;
    }
    if (nextDeadline < Infinity) {
      this.timer = setTimeout(() => this.schedule(), Math.max(0, nextDeadline - now));
      return;
    }
    for (const r of this.idle.splice(0)) r();
  }

  private async runBatch(bucket: number): Promise<void> {
    this.busy = true;
    const q = this.queues.get(bucket)!;
    const batch = q.splice(0, this.opts.maxBatch);
    this.waiting -= batch.length;
    this.setDepth();
    const m = this.opts.metrics;
    const start = performance.now();
    for (const p of batch) m?.queueSeconds.observe((start - p.enqueued) / 1000);
    m?.batchSize.observe(batch.length);
    m?.sequences.inc({}, batch.length);
    try {
      const outs = await this.opts.run(batch.map((p) => p.row), bucket);
      batch.forEach((p, i) => p.resolve(outs[i]));
    } catch (e) {
      for (const p of batch) p.reject(e);
    } finally {
      m?.computeSeconds.observe((performance.now() - start) / 1000);
      this.busy = false;
      this.schedule();
    }
  }
}
