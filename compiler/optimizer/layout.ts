/**
 * The flat layout the optimizer works in: every parameter (and its gradient and moments) is a range of one
 * vector of P elements, so the update of all parameters is a few kernels over that vector rather than a
 * few kernels per tensor (NVIDIA's multi-tensor LAMB does the same with lists of pointers; here the memory
 * plan places the tensors inside the vector, compiler/fusion/in_place.ts).
 *
 * LAMB needs per-tensor norms. The vector is viewed as [chunks, CHUNK] rows and every tensor starts on a
 * chunk boundary (its last chunk padded with zeros), so a tensor is a run of whole rows: per-row sums of
 * squares are one row reduction over the vector, and a tensor's norm is the sum of its run of row sums.
 */
import type { Graph } from "../../ir/mod.ts";

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
}

/**
 * BERT's exclusions from weight decay: NVIDIA's run_pretraining.py lists `bias`, `gamma`, `beta` and
 * `LayerNorm` in no_decay and matches them as substrings of the parameter name.
 */
export function excludedFromDecay(name: string): boolean {
  return ["bias", "gamma", "beta", "LayerNorm"].some((s) => name.includes(s));
}

/** At most this many chunks: keeps the per-tensor gather ([tensors, maxChunks]) small. */
const TARGET_CHUNKS = 16384;
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
): FlatLayout {
  if (!(Number.isInteger(Math.log2(chunk)) && chunk >= MIN_CHUNK)) {
    throw new Error(`flat layout: chunk ${chunk} must be a power of two >= ${MIN_CHUNK}`);
  }
  const segments: Segment[] = [];
  let firstChunk = 0;
  for (const p of params) {
    const size = p.shape.reduce((x, y) => x * y, 1);
    const chunks = Math.max(1, Math.ceil(size / chunk));
    segments.push({
      name: p.name,
      shape: [...p.shape],
      size,
      offset: firstChunk * chunk,
      firstChunk,
      chunks,
      decay: !excludedFromDecay(p.name),
    });
    firstChunk += chunks;
  }
  return {
    chunk,
    total: firstChunk * chunk,
    chunks: firstChunk,
    segments,
    maxChunks: segments.reduce((a, s) => Math.max(a, s.chunks), 1),
  };
}

/** The constant tables the optimizer graph reads (inputs written once, see optimizerGraph). */
export function layoutTables(layout: FlatLayout): { segments: Int32Array; chunkSegment: Int32Array } {
  const segments = new Int32Array(layout.segments.length * 3);
  const chunkSegment = new Int32Array(layout.chunks);
  layout.segments.forEach((s, i) => {
    segments.set([s.firstChunk, s.chunks, s.decay ? 1 : 0], i * 3);
    chunkSegment.fill(i, s.firstChunk, s.firstChunk + s.chunks);
  });
  return { segments, chunkSegment };
}

/** The layout of a graph's parameters, in graph order (the same for the compiler and the trainer). */
export function flatLayoutOf(g: Graph, chunk?: number): FlatLayout {
  const params = [...g.sources("param").values()].map((n) => ({
    name: String(n.attrs.name),
    shape: n.type.shape,
  }));
  return flatLayout(params, chunk);
}
