/** The model-building DSL: what model files import, and nothing else of ours. */
export { type BuilderOptions, type Init, ModelBuilder, ModelError } from "./builder.ts";
export { Tensor, type TensorLike } from "./tensor.ts";
export {
  type Activation,
  activation,
  crossEntropy,
  dropout,
  gelu,
  geluTanh,
  layerNorm,
  linear,
  logSumExp,
  softmax,
} from "./nn.ts";
export { type AttentionWeights, selfAttention } from "./attention.ts";
