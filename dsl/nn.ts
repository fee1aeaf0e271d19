/**
 * Neural-network composites built only from primitives. Nothing here is a special op: fusion must find
 * these patterns again in the graph and turn them into kernels (and kernel-count tests prove it does).
 */
import { locSuffix, ModelError } from "./builder.ts";
import type { Tensor } from "./tensor.ts";

/** y = x W^T + b for x [..., in] and W [out, in] (Hugging Face / PyTorch layout), as one 2-D GEMM. */
export function linear(x: Tensor, weight: Tensor, bias?: Tensor): Tensor {
  const inF = x.shape[x.rank - 1], outF = weight.shape[0];
  const flat = x.reshape([-1, inF]);
  let y = flat.matmul(weight, { transposeB: true });
  if (bias) y = y.add(bias);
  return y.reshape([...x.shape.slice(0, -1), outF]);
}

/** LayerNorm over the last axis with biased variance: (x - mean) / sqrt(var + eps) * gamma + beta. */
export function layerNorm(x: Tensor, gamma: Tensor, beta: Tensor, eps: number): Tensor {
  const centered = x.sub(x.mean(-1));
  const variance = centered.square().mean(-1);
  return centered.mul(variance.add(eps).rsqrt()).mul(gamma).add(beta);
}

export type Activation = "gelu" | "gelu_tanh" | "relu";

/** GELU, erf form: x/2 * (1 + erf(x / sqrt 2)). */
export function gelu(x: Tensor): Tensor {
  return x.mul(0.5).mul(x.mul(Math.SQRT1_2).erf().add(1));
}

/** GELU, tanh approximation: x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))). */
export function geluTanh(x: Tensor): Tensor {
  const inner = x.add(x.mul(x).mul(x).mul(0.044715)).mul(Math.sqrt(2 / Math.PI));
  return x.mul(0.5).mul(inner.tanh().add(1));
}

export function activation(x: Tensor, kind: Activation): Tensor {
  switch (kind) {
    case "gelu":
      return gelu(x);
    case "gelu_tanh":
      return geluTanh(x);
    case "relu":
      return x.maximum(0);
  }
}

/**
 * Softmax over `axis` of x + mask (the mask is added before the max, so masked entries never win). The
 * subtracted max carries no gradient: softmax does not depend on it.
 */
export function softmax(x: Tensor, axis = -1, additiveMask?: Tensor): Tensor {
  const z = additiveMask ? x.add(additiveMask) : x;
  const shifted = z.sub(z.max(axis).stopGradient());
  const e = shifted.exp();
  return e.div(e.sum(axis));
}

/** log(sum(exp(x))) over the last axis, kept as a size-1 axis. */
export function logSumExp(x: Tensor): Tensor {
  const m = x.max(-1).stopGradient();
  return x.sub(m).exp().sum(-1).log().add(m);
}

/** A dropout probability in [0, 1), or a ModelError at the model line. */
export function checkDropout(p: number): void {
  if (!(p >= 0 && p < 1)) {
    throw new ModelError(`dropout: probability must be in [0, 1), got ${p}${locSuffix()}`);
  }
}

/**
 * Inverted dropout: zero with probability p, scale survivors by 1/(1-p). The mask comes from the
 * counter-based generator keyed by `key` (u32[2]: seed, step), so backward passes can regenerate it.
 */
export function dropout(x: Tensor, p: number, key: Tensor | undefined): Tensor {
  checkDropout(p);
  if (p === 0 || !key) return x;
  const keep = x.builder.randomUniform(key, x.shape).ge(p);
  return x.builder.where(keep, x.mul(1 / (1 - p)), 0);
}

/**
 * Mean cross-entropy of logits [N, C] against integer labels [N]; labels equal to `ignoreIndex` do not
 * count (and a batch with none left gives 0, not NaN). Computed in f32 whatever the logits' dtype.
 * Returns the loss (a scalar) and the number of counted labels.
 */
export function crossEntropy(
  logits: Tensor,
  labels: Tensor,
  ignoreIndex = -1,
): { loss: Tensor; count: Tensor; correct: Tensor } {
  const [n, c] = logits.shape;
  if (logits.rank !== 2 || labels.rank !== 1 || labels.shape[0] !== n) {
    throw new ModelError(
      `crossEntropy: expects logits [N, C] and labels [N], got [${logits.shape}] and [${labels.shape}]${locSuffix()}`,
    );
  }
  const b = logits.builder;
  const x = logits.cast("f32");
  const lbl = labels.reshape([n, 1]);
  const oneHot = b.iota([n, c], 1, labels.dtype).eq(lbl);
  const picked = b.where(oneHot, x, 0).sum(-1);
  const valid = labels.ne(ignoreIndex).cast("f32").reshape([n, 1]);
  const count = valid.sum([0, 1], false);
  const perRow = logSumExp(x).sub(picked).mul(valid);
  const loss = perRow.sum([0, 1], false).div(count.maximum(1));
  // A prediction counts as correct when the true class's logit is the row maximum.
  const correct = picked.ge(x.max(-1)).cast("f32").mul(valid).sum([0, 1], false);
  return { loss, count, correct };
}
