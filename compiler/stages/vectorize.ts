/** Vectorizing: loop kernels whose bindings allow it process four consecutive elements per thread. */
import { vectorizeLoop } from "../lower/vectorize.ts";
import type { Stage } from "../pipeline.ts";
import { type KernelState, need } from "./state.ts";

export const vectorizeStage: Stage<KernelState> = {
  name: "vectorize",
  about: "loop kernels that qualify take four consecutive elements per thread (vec4 loads and stores)",
  run: (s) => ({
    ...s,
    kernels: need(s.kernels, "lowered kernels", "vectorize").map(vectorizeLoop),
    vectorized: true,
  }),
  skip: (s) => ({ ...s, vectorized: false }),
};
