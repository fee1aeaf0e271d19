/**
 * BERT's self-attention block as a test graph: Q, K and V projections with biases, heads split by a
 * reshape and permute, scaled scores with the padding mask, softmax, dropout, P·V, heads merged and the
 * output projection; forward and backward (every parameter's gradient and the input's). Its GEMMs are the
 * attention GEMMs of a BERT layer (QKᵀ, PV and the four of their backward) and the projections that
 * produce and consume the heads, so a plan of it shows whether every one of them is a library call.
 */
import { graphOf } from "../../cases/fusion_cases.ts";
import type { seededRandom } from "../../cases/random.ts";
import { linear, type ModelBuilder, selfAttention, type Tensor } from "../../dsl/mod.ts";
import type { DType, Graph } from "../../ir/mod.ts";

export interface AttentionShape {
  readonly b: number;
  readonly s: number;
  readonly heads: number;
  readonly dh: number;
}

/** Batch 1; batch 2 (token-major results in two groups); batch 3 with 4 heads (through the epilogue). */
export const ATTENTION_SHAPES: AttentionShape[] = [
  { b: 1, s: 5, heads: 2, dh: 4 },
  { b: 2, s: 5, heads: 2, dh: 4 },
  { b: 3, s: 5, heads: 4, dh: 2 },
];

export function attentionBlock(shape: AttentionShape, dt: DType, dropoutProb = 0.1): Graph {
  const { b, s, heads, dh } = shape;
  const h = heads * dh;
  return graphOf(
    `attention block ${b}x${s}x${heads}x${dh}`,
    (m: ModelBuilder) => {
      const dense = (name: string) => ({
        weight: m.param(`${name}.weight`, [h, h], "zeros", dt),
        bias: m.param(`${name}.bias`, [h], "zeros", dt),
      });
      const x = m.input("x", dt, [b, s, h]);
      const mask = m.input("mask", "i32", [b, s]).cast(dt).sub(1).mul(10000).reshape([b, 1, 1, s]);
      const key = m.input("rng_key", "u32", [2]);
      const w = { query: dense("q"), key: dense("k"), value: dense("v") };
      const ctx: Tensor = selfAttention(x, w, heads, mask, dropoutProb, key);
      const out = dense("o");
      return linear(ctx, out.weight, out.bias);
    },
    dt,
    true,
  );
}

/** Integer feeds: the last key of each sequence is padding; the dropout key is random. */
export const attentionInts = (s: number) => ({
  mask: (_r: ReturnType<typeof seededRandom>, i: number) => (i % s < s - 1 ? 1 : 0),
  rng_key: (r: ReturnType<typeof seededRandom>) => r.u32(),
});
