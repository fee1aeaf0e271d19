/**
 * A Plan: everything a runtime needs to execute one compiled graph, and nothing about how it was
 * compiled. The compiler produces it; runtimes consume it; `deno task compile` writes it as JSON beside the
 * kernels. Shapes are static, so every size and launch shape is known here. Each buffer lives in a `slot`
 * that buffers of disjoint lifetimes share; inputs, params and outputs have slots of their own, so feeding
 * and reading them is always safe (flat vectors and views: DESIGN.md, notes: plan/plan.ts).
 */

import { numel } from "../ir/dtype.ts";

export type PlanDType = "f32" | "f16" | "bf16" | "i32" | "u32" | "bool";

export type BufferRole = "input" | "param" | "output" | "activation";

export interface PlanBuffer {
  readonly id: number;
  /** Graph name for inputs/params/outputs; `%<node>` (with the op) for activations. */
  readonly name: string;
  readonly dtype: PlanDType;
  readonly shape: readonly number[];
  /** Bytes of the logical tensor (bool counted as 1 byte; targets may store it wider). */
  readonly bytes: number;
  readonly role: BufferRole;
  readonly slot: number;
  /**
   * Bytes from the start of the slot (absent: 0). Non-zero where several buffers are parts of one larger
   * buffer (an in-place concat: each parameter and each gradient is a piece of one flat vector the
   * optimizer updates in a few launches). Always a multiple of PLAN_OFFSET_ALIGN.
   */
  readonly offset?: number;
}

/**
 * Graph outputs named `<UPDATE_PREFIX><name>` hold the value of `<name>` (a parameter, an input, or a flat
 * vector assembled from them) after the step; runtimes copy them back (`Plan.updates`).
 */
export const UPDATE_PREFIX = "new:";

/** Offsets inside a slot are multiples of this (WebGPU's minStorageBufferOffsetAlignment is at most 256). */
export const PLAN_OFFSET_ALIGN = 256;

export interface PlanSlot {
  readonly id: number;
  /** Elements-times-width of the largest buffer assigned, in bytes, as stored on the widest target. */
  readonly bytes: number;
}

export interface PlanBinding {
  /** Binding index in the kernel (WGSL @binding(i), CUDA parameter i). */
  readonly index: number;
  readonly name: string;
  readonly buffer: number;
  readonly access: "read" | "write" | "read_write";
  /**
   * Set where the buffer is over WebGPU's binding limit: it is bound as consecutive ranges of this many
   * elements (the last one shorter), each at its own WGSL binding (plan/binding_ranges.ts). CUDA and the
   * CPU bind the whole buffer as one pointer and ignore it.
   */
  readonly rangeElements?: number;
}

/** One target's rendering of a kernel. */
export interface TargetKernel {
  readonly code: string;
  /** Launch grid in workgroups/blocks: [x, y, z]. */
  readonly grid: readonly [number, number, number];
  readonly workgroupSize: number;
}

/**
 * One matrix of a library GEMM, row-major with element offsets and strides: for batch β,
 * op(X)[i][j] = buffer[offset + β·batchStride + (trans ? j·ld + i : i·ld + j)] (D is never transposed);
 * in a call with `outer` groups, β = o·(batch/outer) + q is at offset + o·outerStride + q·batchStride.
 */
export interface PlanGemmOperand {
  readonly buffer: number;
  readonly offset: number;
  readonly dtype: "f32" | "f16" | "bf16";
  readonly ld: number;
  readonly trans: boolean;
  readonly batchStride: number;
  /** Elements between batch groups; present when the call has `outer`. */
  readonly outerStride?: number;
}

/** The vector of a library epilogue: element e at buffer[offset + β·batchStride + e], in `dtype`. */
export interface PlanGemmVector {
  readonly buffer: number;
  readonly offset: number;
  readonly dtype: "f32" | "f16" | "bf16";
  readonly batchStride: number;
}

/**
 * A library epilogue fused into the call.
 *
 * "bias" (cuBLASLt's CUBLASLT_EPILOGUE_BIAS): a packed vector over D's columns, bias[j] =
 * buffer[offset + β·batchStride + j] for every row of batch entry β, stored in D's dtype
 * (compiler/lower/gemm_library.ts LT_BIAS_TYPES) and added to the f32 accumulator before D's one rounding:
 * D[β][i][j] = Σ_p op(A)[i][p]·op(B)[p][j] + bias[j]. A call in groups has batchStride 0.
 *
 * "bgrad" (a bias gradient, cuBLASLt's BGRADA / BGRADB; runtime/cuda/lt_mapping.ts picks which): besides
 * D, the call writes the sums over k of one operand into the vector: operand "a": bias[i] = Σ_p
 * op(A)[i][p] (length m); operand "b": bias[j] = Σ_p op(B)[p][j] (length n); accumulated in f32, stored
 * in bias.dtype. One batch entry, batchStride 0. `fallback` names the plan kernels that compute the same
 * vector (the column sums it replaces, compiler/lower/gemm_bgrad.ts): a runtime launches them only where
 * the call runs without this epilogue (a heuristic miss, the template GEMM), and skips them otherwise.
 * `copies`: buffers (of bias.dtype, the vector's length) those kernels also write the vector to (a
 * gradient that is a graph output and a piece of the optimizer's flat vector): where the call writes the
 * vector, the runtime copies it into each of them right after the call.
 */
export type PlanGemmEpilogue =
  | { readonly kind: "bias"; readonly bias: PlanGemmVector }
  | {
    readonly kind: "bgrad";
    readonly operand: "a" | "b";
    readonly bias: PlanGemmVector;
    readonly fallback: readonly string[];
    readonly copies: readonly number[];
  };

/**
 * A GEMM as one library call (cuBLASLt on CUDA): D[β] (m×n) = op(A[β]) (m×k) · op(B[β]) (k×n) for
 * β < batch (+ C, beta 1, where `c` is given; else beta 0), alpha 1, accumulated in f32 ("32F":
 * CUBLAS_COMPUTE_32F), then `epilogue` if any.
 * compiler/lower/gemm_library.ts derives it.
 */
export interface PlanGemm {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  /** Batch entries in all; with `outer`, `outer` groups of batch/outer strided entries (one call each on CUDA). */
  readonly batch: number;
  readonly outer?: number;
  readonly a: PlanGemmOperand;
  readonly b: PlanGemmOperand;
  readonly d: PlanGemmOperand;
  /**
   * Beta 1: D = op(A)·op(B) + C, C laid out as D (same offset rule, ld and strides) and stored in D's dtype,
   * added to the f32 accumulator before D's one rounding (compiler/fusion/sums_into_gemms.ts). Absent: beta 0.
   */
  readonly c?: PlanGemmOperand;
  readonly compute: "32F";
  readonly epilogue?: PlanGemmEpilogue;
}

/**
 * A matmul kernel as a library call (cuBLASLt on CUDA, a BLAS sgemm on the CPU): the GEMM call, then
 * (unless the call writes the kernel's only output itself) an elementwise epilogue kernel that reads the
 * call's f32 product from D's buffer (a scratch buffer of the plan) and computes and stores every output of
 * the fused kernel. The kernel's own `source` is the call's fallback: the template GEMM computing the same,
 * launched where the library cannot run the call.
 */
export interface PlanLibraryGemm {
  readonly call: PlanGemm;
  readonly epilogue?: {
    readonly name: string;
    readonly bindings: readonly PlanBinding[];
    readonly source: TargetKernel;
  };
}

export interface PlanKernel {
  readonly name: string;
  readonly kind: string;
  readonly bindings: readonly PlanBinding[];
  /** The kernel in the plan's language (Plan.language); a library kernel's fallback. */
  readonly source: TargetKernel;
  /** The GEMM as a library call (+ epilogue kernel), run instead of `source` where the library can. */
  readonly library?: PlanLibraryGemm;
  /** What the kernel fuses, for reports and error messages. */
  readonly about: readonly string[];
  /** Estimated bytes read and written per launch (the fusion report's traffic model). */
  readonly bytesRead: number;
  readonly bytesWritten: number;
  /** Floating-point operations per launch (matmuls: 2·M·N·K; elementwise: one per op per element). */
  readonly flops: number;
}

export type PlanStep =
  | { readonly op: "launch"; readonly kernel: number }
  | { readonly op: "copy"; readonly src: number; readonly dst: number; readonly bytes: number };

/** The languages a plan's kernels are written in (compiler/targets/target.ts). */
export type PlanLanguage = "wgsl" | "cuda" | "c";

export interface Plan {
  readonly version: 2;
  readonly graph: string;
  /** The target it was compiled for (compiler/targets/target.ts TARGETS) and that target's language. */
  readonly target: string;
  readonly language: PlanLanguage;
  readonly buffers: readonly PlanBuffer[];
  readonly slots: readonly PlanSlot[];
  /** Graph input name -> buffer id. */
  readonly inputs: Readonly<Record<string, number>>;
  /** Parameter name -> buffer id. */
  readonly params: Readonly<Record<string, number>>;
  /** Graph output name -> buffer id. */
  readonly outputs: Readonly<Record<string, number>>;
  readonly kernels: readonly PlanKernel[];
  /** The step program, in order. Parameter updates are copies at the end (`updates`). */
  readonly steps: readonly PlanStep[];
  /** After the step: copy buffer `value` into parameter buffer `param` (training updates). */
  readonly updates: readonly { readonly param: number; readonly value: number }[];
}

/** Bytes per element of a dtype as stored by the runtimes (bool widened to u32 for WGSL's sake). */
export function storedBytes(dtype: PlanDType): number {
  return dtype === "f16" || dtype === "bf16" ? 2 : 4;
}

/** Bytes a buffer takes as the runtimes store it (before rounding up for alignment). */
export function storedSize(b: { readonly shape: readonly number[]; readonly dtype: PlanDType }): number {
  return numel(b.shape) * storedBytes(b.dtype);
}

/**
 * Why a runtime for `language` cannot run `plan` (one line), or undefined when it can: a plan is compiled
 * for one target, and its kernels exist in that target's language only.
 */
export function languageRefusal(plan: Plan, language: PlanLanguage, runtime: string): string | undefined {
  if (plan.language === language) return undefined;
  return `the plan was compiled for ${plan.target} (${plan.language}); ${runtime} runs ${language} plans: ` +
    `recompile it for this device`;
}
