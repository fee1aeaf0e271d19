/**
 * Initial parameter values, following each param node's `init` rule: "zeros", "ones", or
 * "trunc_normal(std)" — a normal distribution with the given standard deviation, redrawn outside two
 * standard deviations, as BERT's TensorFlow code (tf.truncated_normal_initializer) does.
 *
 * Values come from the same Philox generator as dropout, with one stream per parameter derived from its
 * name, so a parameter starts the same whatever head or batch shape the graph was built for.
 */
import type { Graph } from "../ir/mod.ts";
import { numel } from "../ir/mod.ts";
import { fillPhiloxWords } from "../numeric/philox.ts";

/** FNV-1a over the UTF-16 code units of a name: a stable u32 stream id. */
function streamOf(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** Philox words drawn per block: enough to amortize the call, small enough to stay in L1. */
const BLOCK_WORDS = 4096;
const words = new Uint32Array(BLOCK_WORDS);

/**
 * Fills `out` with truncated normals (mean 0, std 1, |x| <= 2) times `std` from one Philox stream. Counter
 * c gives words[4c..4c+3]; Box-Muller turns each pair (u1 in (0, 1], u2) into two normals, kept in order
 * when |z| <= 2. Allocation-free: BERT-large draws 336 M values.
 */
function fillTruncatedNormal(out: Float32Array, seed: number, stream: number, std: number): void {
  let counter = 0, i = 0;
  const n = out.length;
  while (i < n) {
    // Each counter yields at most 4 values: a small parameter draws no more counters than it can use.
    const counters = Math.min(BLOCK_WORDS / 4, Math.ceil((n - i) / 4));
    const block = words.subarray(0, 4 * counters);
    fillPhiloxWords(block, counter, seed >>> 0, stream);
    counter += counters;
    for (let k = 0; k < block.length && i < n; k += 2) {
      const r = Math.sqrt(-2 * Math.log((block[k] + 1) / 4294967296));
      const theta = 2 * Math.PI * (block[k + 1] / 4294967296);
      const z0 = r * Math.cos(theta);
      if (Math.abs(z0) <= 2) out[i++] = Math.fround(z0) * std;
      if (i >= n) break;
      const z1 = r * Math.sin(theta);
      if (Math.abs(z1) <= 2) out[i++] = Math.fround(z1) * std;
    }
  }
}

/** A parameter's init rule, read once for initParams and its parallel form. */
export interface ParamInit {
  readonly name: string;
  readonly size: number;
  readonly ones: boolean;
  /** The standard deviation of a truncated normal; undefined for zeros and ones. */
  readonly std?: number;
}

export function paramInits(g: Graph): ParamInit[] {
  return [...g.sources("param")].map(([name, node]) => {
    const init = node.attrs.init as string;
    const std = init.startsWith("trunc_normal(") ? Number(init.slice("trunc_normal(".length, -1)) : undefined;
    return { name, size: numel(node.type.shape), ones: init === "ones", std };
  });
}

/** Fills `out` by one parameter's rule (zeros need nothing: a new array is zero). */
export function fillParam(out: Float32Array, p: ParamInit, seed: number): void {
  if (p.ones) out.fill(1);
  else if (p.std !== undefined) fillTruncatedNormal(out, seed, streamOf(p.name), p.std);
}

export function initParams(g: Graph, seed: number): Map<string, Float32Array> {
  const values = new Map<string, Float32Array>();
  for (const p of paramInits(g)) {
    const out = new Float32Array(p.size);
    fillParam(out, p, seed);
    values.set(p.name, out);
  }
  return values;
}
