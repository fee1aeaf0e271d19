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

/** The cases' graphs at the enlarged sizes (the shared case sizes are restored afterwards). */
export function profileCases(): ProfileCase[] {
  const saved = [B, S, H] as const;
  setCaseSizes(4, 64, 128);
  try {
    return ROW_CASES.map((name) => {
      const c = FUSION_CASES.find((x) => x.name === name);
      if (!c) throw new Error(`no fusion case '${name}'`);
      return { case: c, graph: graphOf(c.name, c.body, "f32", c.backward) };
    });
  } finally {
    setCaseSizes(...saved);
  }
}
