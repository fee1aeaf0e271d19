/**
 * The order training rows are seen in: epoch after epoch, each a permutation of the rows drawn from
 * (seed, epoch). Sequence k of the run is row perm(floor(k / N))[k mod N], so a step's batch depends on
 * nothing but its number, and a resumed run sees exactly the rows the uninterrupted one would have.
 */
import type { Row } from "./tasks.ts";

/** mulberry32: a small, well-mixed 32-bit generator (Tommy Ettinger's constants). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class RowOrder {
  private cache = new Map<number, Uint32Array>();
  constructor(readonly n: number, readonly seed: number) {}

  private perm(epoch: number): Uint32Array {
    let p = this.cache.get(epoch);
    if (!p) {
      p = Uint32Array.from({ length: this.n }, (_, i) => i);
      const r = rng(this.seed ^ Math.imul(epoch + 1, 0x9e3779b9));
      for (let i = this.n - 1; i > 0; i--) {
        const j = Math.floor(r() * (i + 1));
        [p[i], p[j]] = [p[j], p[i]];
      }
      this.cache.clear(); // one epoch at a time is all a run needs
      this.cache.set(epoch, p);
    }
    return p;
  }

  /** Row index of sequence k of the run. */
  at(k: number): number {
    return this.perm(Math.floor(k / this.n))[k % this.n];
  }
}

export type Feed = Record<string, Int32Array | Float32Array>;

/** The data inputs of a micro-batch of `size` rows starting at sequence `first`. */
export function batchFeed(
  rows: Row[],
  order: RowOrder,
  first: number,
  size: number,
  seqLen: number,
  kind: string,
): Feed {
  const ids = new Int32Array(size * seqLen),
    types = new Int32Array(size * seqLen),
    mask = new Int32Array(size * seqLen);
  const picked = Array.from({ length: size }, (_, i) => rows[order.at(first + i)]);
  picked.forEach((r, i) => {
    ids.set(r.input_ids, i * seqLen);
    types.set(r.token_type_ids, i * seqLen);
    mask.set(r.attention_mask, i * seqLen);
  });
  const feed: Feed = { input_ids: ids, token_type_ids: types, attention_mask: mask };
  if (kind === "qa") {
    feed.start_positions = Int32Array.from(picked, (r) => r.start_position!);
    feed.end_positions = Int32Array.from(picked, (r) => r.end_position!);
  } else if (kind === "regression") feed.labels = Float32Array.from(picked, (r) => r.label!);
  else feed.labels = Int32Array.from(picked, (r) => r.label!);
  return feed;
}
