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
export function streamOf(name: string): number {
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
export function fillTruncatedNormal(out: Float32Array, seed: number, stream: number, std: number): void {
  let counter = 0, i = 0;
  const n = out.length;
  while (i < n) {
    // Each counter yields at most 4 values, so a block never needs more counters than values left.
    const counters = Math.min(BLOCK_WORDS / 4, Math.ceil((n - i) / 4) + 1);
    const block = counters === BLOCK_WORDS / 4 ? words : words.subarray(0, 4 * counters);
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

export function initParams(g: Graph, seed: number): Map<string, Float32Array> {
  const values = new Map<string, Float32Array>();
  for (const [name, node] of g.sources("param")) {
    const out = new Float32Array(numel(node.type.shape));
    const init = node.attrs.init as string;
    if (init === "ones") out.fill(1);
    else if (init.startsWith("trunc_normal(")) {
      const std = Number(init.slice("trunc_normal(".length, -1));
      fillTruncatedNormal(out, seed, streamOf(name), std);
    }
    values.set(name, out);
  }
  return values;
}
