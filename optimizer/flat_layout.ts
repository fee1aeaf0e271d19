/**
 * The flat layout the optimizer works in: every parameter (and its gradient and moments) is a range of one
 * vector of P elements, so the update of all parameters is a few kernels over that vector rather than a
 * few kernels per tensor. Tensors start on CHUNK boundaries, so LAMB's per-tensor norms are sums of row
 * sums; a device's binding limit cuts the vector into groups of whole tensors, offsets staying global
 * (DESIGN.md, notes: optimizer/flat_layout.ts).
 */
import type { Graph } from "../ir/mod.ts";

export interface Segment {
  /** The parameter's graph name. */
  readonly name: string;
  readonly shape: readonly number[];
  readonly size: number;
  /** First element in the flat vector (a multiple of the chunk size). */
  readonly offset: number;
  readonly firstChunk: number;
  readonly chunks: number;
  /** Weight decay applies (not to biases and LayerNorm parameters, as in BERT). */
  readonly decay: boolean;
  /** The group whose vector holds this tensor. */
  readonly group: number;
}

/** A contiguous range of whole tensors of the flat vector, optimized as one vector of its own. */
export interface Group {
  readonly index: number;
  /** First element in the (logical) flat vector; a multiple of the chunk size. */
  readonly offset: number;
  /** Elements of the group's vector, padding included (chunks * chunk). */
  readonly total: number;
  readonly firstChunk: number;
  readonly chunks: number;
  /** Its tensors: layout.segments[firstSegment, firstSegment + segmentCount). */
  readonly firstSegment: number;
  readonly segmentCount: number;
  /** The most chunks one of its tensors spans. */
  readonly maxChunks: number;
}

export interface FlatLayout {
  /** Elements per chunk (row of the [chunks, chunk] view): a power of two, at least 64. */
  readonly chunk: number;
  /** Elements in the flat vector, padding included (chunks * chunk). */
  readonly total: number;
  readonly chunks: number;
  readonly segments: readonly Segment[];
  /** The most chunks any one tensor spans (the width of the per-tensor gather). */
  readonly maxChunks: number;
  /** At least one; exactly one when the whole vector fits the budget (or there is none). */
  readonly groups: readonly Group[];
}

/** How to cut the flat vector into groups. */
export interface GroupOptions {
  /**
   * The most bytes one group's vector may take (f32 elements, padding included); absent: one group. The
   * WebGPU backend's min(maxStorageBufferBindingSize, maxBufferSize); tests force small values.
   */
  readonly maxGroupBytes?: number;
}

/** A group budget that is no budget (not a positive number of bytes): one line. */
export class LayoutError extends Error {
  override name = "LayoutError";
}

/** Bytes per element of the flat vectors (f32 master weights, moments and gradients). */
const ELEMENT_BYTES = 4;

/**
 * BERT's exclusions from weight decay: NVIDIA's run_pretraining.py lists `bias`, `gamma`, `beta` and
 * `LayerNorm` in no_decay and matches them as substrings of the parameter name.
 */
export function excludedFromDecay(name: string): boolean {
  return ["bias", "gamma", "beta", "LayerNorm"].some((s) => name.includes(s));
}

/**
 * At most this many chunks: keeps the per-tensor gather ([tensors, maxChunks]) small. Each tensor's last
 * chunk is padded, and every optimizer pass reads and writes the padding: bert-large's ~250 vectors of
 * 1,024 elements pad its 336 M parameters by 2.3% with 32,768-element chunks (16,384 chunks), by 0.5% with
 * 8,192 (65,536 chunks), whose gather is still only [398, 3816].
 */
const TARGET_CHUNKS = 65536;
/** 64 f32 elements = 256 bytes, the binding-offset alignment WebGPU requires of each tensor's range. */
const MIN_CHUNK = 64;

/** The smallest power-of-two chunk (>= 64) that keeps the vector at about TARGET_CHUNKS rows or fewer. */
export function chooseChunk(elements: number): number {
  let chunk = MIN_CHUNK;
  while (elements / chunk > TARGET_CHUNKS) chunk *= 2;
  return chunk;
}

export function flatLayout(
  params: readonly { readonly name: string; readonly shape: readonly number[] }[],
  chunk = chooseChunk(params.reduce((a, p) => a + p.shape.reduce((x, y) => x * y, 1), 0)),
  groupOptions: GroupOptions = {},
): FlatLayout {
  if (!(Number.isInteger(Math.log2(chunk)) && chunk >= MIN_CHUNK)) {
    throw new Error(`flat layout: chunk ${chunk} must be a power of two >= ${MIN_CHUNK}`);
  }
  const budget = groupOptions.maxGroupBytes;
  if (budget !== undefined && !(budget > 0)) {
    throw new LayoutError(`flat layout: the group budget must be a positive number of bytes, got ${budget}`);
  }
  // Chunks per group: greedy, in graph order (contiguous, so a group is one range of the flat vector).
  const maxGroupChunks = budget === undefined ? Infinity : Math.floor(budget / (chunk * ELEMENT_BYTES));
  const segments: Segment[] = [];
  const starts: number[] = [0]; // first segment of each group
  let firstChunk = 0, groupStart = 0;
  // A tensor over the budget is a group of its own, which the device binds as several ranges of one
  // buffer (plan/binding_ranges.ts); the tensor after it starts the next group.
  let closed = false;
  for (const p of params) {
    const size = p.shape.reduce((x, y) => x * y, 1);
    const chunks = Math.max(1, Math.ceil(size / chunk));
    const alone = chunks > maxGroupChunks;
    if (firstChunk > groupStart && (closed || alone || firstChunk + chunks - groupStart > maxGroupChunks)) {
      starts.push(segments.length);
      groupStart = firstChunk;
    }
    closed = alone;
    segments.push({
      name: p.name,
      shape: [...p.shape],
      size,
      offset: firstChunk * chunk,
      firstChunk,
      chunks,
      decay: !excludedFromDecay(p.name),
      group: starts.length - 1,
    });
    firstChunk += chunks;
  }
  const groups = starts.map((first, index): Group => {
    const end = starts[index + 1] ?? segments.length;
    const own = segments.slice(first, end);
    const start = own[0]?.firstChunk ?? 0;
    const chunks = own.reduce((a, s) => a + s.chunks, 0);
    return {
      index,
      offset: start * chunk,
      total: chunks * chunk,
      firstChunk: start,
      chunks,
      firstSegment: first,
      segmentCount: own.length,
      maxChunks: own.reduce((a, s) => Math.max(a, s.chunks), 1),
    };
  });
  return {
    chunk,
    total: firstChunk * chunk,
    chunks: firstChunk,
    segments,
    maxChunks: segments.reduce((a, s) => Math.max(a, s.chunks), 1),
    groups,
  };
}

/** A group's tensors, in order. */
export function groupSegments(layout: FlatLayout, group: Group): readonly Segment[] {
  return layout.segments.slice(group.firstSegment, group.firstSegment + group.segmentCount);
}

/**
 * The constant tables the optimizer graph reads for one group (inputs written once, see appendOptimizer):
 * chunks and tensors counted from the group's start. Without a group: the first (with one group, the
 * whole vector).
 */
export function layoutTables(
  layout: FlatLayout,
  group: Group = layout.groups[0],
): { segments: Int32Array; chunkSegment: Int32Array } {
  const own = groupSegments(layout, group);
  const segments = new Int32Array(own.length * 3);
  const chunkSegment = new Int32Array(group.chunks);
  own.forEach((s, i) => {
    const first = s.firstChunk - group.firstChunk;
    segments.set([first, s.chunks, s.decay ? 1 : 0], i * 3);
    chunkSegment.fill(i, first, first + s.chunks);
  });
  return { segments, chunkSegment };
}

/**
 * The layout of a graph's parameters, in graph order (the same for the compiler and the trainer, which
 * must pass the same chunk and group options).
 */
export function flatLayoutOf(g: Graph, chunk?: number, groupOptions: GroupOptions = {}): FlatLayout {
  const params = [...g.sources("param").values()].map((n) => ({
    name: String(n.attrs.name),
    shape: n.type.shape,
  }));
  return flatLayout(params, chunk, groupOptions);
}
