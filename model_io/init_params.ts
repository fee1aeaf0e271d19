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
import { philox4x32 } from "../numeric/philox.ts";

/** FNV-1a over the UTF-16 code units of a name: a stable u32 stream id. */
function streamOf(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** Fills `out` with truncated normals (mean 0, std 1, |x| <= 2) from one Philox stream. */
function fillTruncatedNormal(out: Float32Array, seed: number, stream: number): void {
  let counter = 0, i = 0;
  while (i < out.length) {
    const words = philox4x32([counter++, 0, 0, 0], [seed >>> 0, stream]);
    // Box-Muller on two pairs of 32-bit words; u1 is in (0, 1] so the log is finite.
    for (let k = 0; k < 4 && i < out.length; k += 2) {
      const u1 = (words[k] + 1) / 4294967296, u2 = words[k + 1] / 4294967296;
      const r = Math.sqrt(-2 * Math.log(u1));
      for (const z of [r * Math.cos(2 * Math.PI * u2), r * Math.sin(2 * Math.PI * u2)]) {
        if (Math.abs(z) <= 2 && i < out.length) out[i++] = z;
      }
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
      fillTruncatedNormal(out, seed, streamOf(name));
      for (let i = 0; i < out.length; i++) out[i] *= std;
    }
    values.set(name, out);
  }
  return values;
}
