/**
 * The row-major to column-major mapping of a plan GEMM onto cuBLASLt (runtime/cuda/cublaslt.ts LtCall),
 * as a pure function: LtCall builds its descriptors from it, and the CPU shim (tests/util/cuda_cpu.ts)
 * runs the same descriptors through column-major arithmetic, so the mapping is checked end to end against
 * the reference interpreter without a GPU.
 */
import type { GemmDType } from "./cublaslt.ts";

/** One row-major operand of a plan GEMM (plan/plan.ts PlanGemmOperand, less its buffer). */
export interface RowMajorOperand {
  readonly dtype: GemmDType;
  readonly ld: number;
  readonly trans: boolean;
  readonly batchStride: number;
}

/** A plan GEMM's sizes and operands (plan/plan.ts PlanGemm); `outer` groups of batch/outer entries. */
export interface RowMajorGemm {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly batch: number;
  readonly outer?: number;
  readonly a: RowMajorOperand;
  readonly b: RowMajorOperand;
  readonly d: RowMajorOperand;
  /** A bias over D's columns, added before D's rounding (plan/plan.ts PlanGemmEpilogue). */
  readonly epilogue?: {
    readonly kind: "bias";
    readonly bias: { readonly dtype: GemmDType; readonly batchStride: number };
  };
}

/** One column-major matrix layout as cublasLtMatrixLayoutCreate and its batch attributes take it. */
export interface LtLayout {
  readonly dtype: GemmDType;
  readonly rows: number;
  readonly cols: number;
  readonly ld: number;
  /** BATCH_COUNT and STRIDED_BATCH_OFFSET (elements); set on the layout only when batch > 1. */
  readonly batch: number;
  readonly stride: number;
}

/** A row-major plan GEMM in cuBLASLt's column-major terms: its operations, then A, B and D layouts. */
export interface LtDescriptors {
  /** The library's m, n, k: D is m×n column-major. */
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly transA: boolean;
  readonly transB: boolean;
  /** Library A: our B. Library B: our A. */
  readonly a: LtLayout;
  readonly b: LtLayout;
  readonly d: LtLayout;
  /**
   * CUBLASLT_EPILOGUE_BIAS: a vector of `length` elements added to every column of the library's D, one
   * per row. Our bias runs over D's columns (n), which are the rows of the library's n×m Dᵀ, so it is
   * that vector as it is, length n; batch entries `batchStride` elements apart (BIAS_BATCH_STRIDE).
   */
  readonly bias?: { readonly dtype: GemmDType; readonly length: number; readonly batchStride: number };
}

/**
 * The row-major to column-major mapping (see LtCall): D (m×n row-major) is the column-major n×m Dᵀ =
 * op(B)ᵀ·op(A)ᵀ, so the library multiplies our B (its A) by our A (its B); a row-major matrix stored with
 * leading dimension ld is its column-major transpose with the same ld. A pure function, so the CPU shim
 * (tests/util/cuda_cpu.ts) runs the same descriptors through column-major arithmetic.
 */
export function ltDescriptors(
  spec: RowMajorGemm,
): LtDescriptors {
  const { m, n, k } = spec;
  // Groups are separate calls with the same bias pointer: a vector stepped per entry cannot follow them.
  if ((spec.outer ?? 1) > 1 && (spec.epilogue?.bias.batchStride ?? 0) !== 0) {
    throw new Error("a bias stepped per batch entry in a call in groups (plan GEMMs never have one)");
  }
  // A call in `outer` groups is one cublasLtMatmul per group over batch/outer strided entries.
  const batch = spec.batch / (spec.outer ?? 1);
  const layout = (op: RowMajorOperand, rows: number, cols: number): LtLayout => ({
    dtype: op.dtype,
    rows,
    cols,
    ld: op.ld,
    batch,
    stride: op.batchStride,
  });
  return {
    m: n,
    n: m,
    k,
    transA: spec.b.trans,
    transB: spec.a.trans,
    // Untransposed, the library sees our [r, c] as [c, r]; transposed (stored [n, k] for B), as stored.
    a: spec.b.trans ? layout(spec.b, k, n) : layout(spec.b, n, k),
    b: spec.a.trans ? layout(spec.a, m, k) : layout(spec.a, k, m),
    d: layout(spec.d, n, m),
    ...(spec.epilogue ? { bias: { ...spec.epilogue.bias, length: n } } : {}),
  };
}
