/**
 * Row-reduction cases big enough that the target profiles lower them differently (compiler/targets/
 * profiles.ts): lavapipe's profile gives each of 256+ rows a thread, a GPU's a workgroup per row (and a
 * scatter-add many threads per column). The
 * fusion cases (fusion_cases.ts) at 4 × 64 tokens of width 128; shared by the CUDA-shim and WebGPU tests.
 */
import { B, FUSION_CASES, type FusionCase, graphOf, H, S, setCaseSizes } from "./fusion_cases.ts";
import type { Graph } from "../ir/mod.ts";

const ROW_CASES = [
  "LayerNorm forward (scale and shift fused)",
  "LayerNorm backward (row kernel for dx, column sums for dγ, dβ)",
  "masked softmax + dropout, forward and backward",
  "cross-entropy forward and backward (ignored labels)",
  "embedding gather + LayerNorm, and the scatter-add of its backward",
];

export interface ProfileCase {
  readonly case: FusionCase;
  readonly graph: Graph;
}

/**
 * A bias gradient over 2,048 tokens: a column sum long enough that GPU profiles take it in two passes
 * (compiler/passes/split_column_sums.ts), with an elementwise producer fused into the first.
 */
const BIAS_GRADIENT: FusionCase = {
  name: "bias gradient over 2048 tokens (column sum, two passes on a GPU)",
  body: (m, dt) => {
    const dy = m.input("dy", dt, [16, 128, 96]);
    return dy.mul(dy).add(dy).sum([0, 1]);
  },
  backward: false,
  dtypes: ["f32"],
};

/** The cases' graphs at the enlarged sizes (the shared case sizes are restored afterwards). */
export function profileCases(): ProfileCase[] {
  const saved = [B, S, H] as const;
  setCaseSizes(4, 64, 128);
  try {
    return ROW_CASES.map((name) => {
      const c = FUSION_CASES.find((x) => x.name === name);
      if (!c) throw new Error(`no fusion case '${name}'`);
      return { case: c, graph: graphOf(c.name, c.body, "f32", c.backward) };
    }).concat([{
      case: BIAS_GRADIENT,
      graph: graphOf(BIAS_GRADIENT.name, BIAS_GRADIENT.body, "f32", false),
    }]);
  } finally {
    setCaseSizes(...saved);
  }
}
