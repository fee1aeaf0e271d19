/** The storage precision stage: the dtype each materialized value is stored in (storage_precision.ts). */
import type { Precision } from "../training_graph/mixed_precision.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import { chooseStorage, fullStorage } from "../storage/storage_precision.ts";
import { type KernelState, need } from "./state.ts";

/** The precision a compile works in: the one asked for, else the one the graph was prepared for. */
export const compilePrecision = (s: KernelState): Precision => s.options.precision ?? s.graph.precision;

export const storageStage: Stage<KernelState> = {
  name: "storage-precision",
  about: "activations between kernels are stored in the low precision (f16/bf16); kernels compute in f32",
  run: (s) => ({
    ...s,
    storage: chooseStorage(s.graph, need(s.fusion, "the fusion", "storage-precision"), compilePrecision(s), {
      // The flat gradient rule: only where the CUDA runtime alone runs the plan with library GEMMs.
      flatGradients: s.options.target.implements.gemm === "cublaslt",
    }),
  }),
  // Every buffer in its graph dtype.
  skip: (s) => ({ ...s, storage: fullStorage(s.graph) }),
};
