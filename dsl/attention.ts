/** Multi-head self-attention (Vaswani et al. 2017) in the BERT layout, around the `attention` op. */
import { checkDropout, linear } from "./nn.ts";
import type { Tensor } from "./tensor.ts";

export interface AttentionWeights {
  query: { weight: Tensor; bias: Tensor };
  key: { weight: Tensor; bias: Tensor };
  value: { weight: Tensor; bias: Tensor };
}

/**
 * x [B, S, H] -> context [B, S, H] (before the output projection). `additiveMask` is [B, 1, 1, S]: 0 for
 * keys to attend to, a large negative number for the others. Dropout applies to the attention
 * probabilities when `dropoutKey` is given.
 */
export function selfAttention(
  x: Tensor,
  w: AttentionWeights,
  numHeads: number,
  additiveMask: Tensor,
  dropoutProb: number,
  dropoutKey: Tensor | undefined,
): Tensor {
  const [b, s, h] = x.shape;
  const dh = h / numHeads;
  // [B, S, H] -> [B, heads, S, dh]
  const heads = (t: Tensor) => t.reshape([b, s, numHeads, dh]).permute([0, 2, 1, 3]);
  const q = heads(linear(x, w.query.weight, w.query.bias));
  const k = heads(linear(x, w.key.weight, w.key.bias));
  const v = heads(linear(x, w.value.weight, w.value.bias));
  checkDropout(dropoutProb);
  const ctx = x.builder.attention(q, k, v, additiveMask, 1 / Math.sqrt(dh), dropoutProb, dropoutKey);
  return ctx.permute([0, 2, 1, 3]).reshape([b, s, h]);
}
