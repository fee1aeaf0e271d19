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
  /** C with beta 1 (plan/plan.ts PlanGemm.c): D = op(A)·op(B) + C, laid out and typed as D. */
  readonly c?: RowMajorOperand;
  /**
   * "bias": a vector over D's columns, added before D's rounding; "bgrad": the sums over k of op(A)'s rows
   * (operand "a") or of op(B)'s columns (operand "b") written to the vector (plan/plan.ts PlanGemmEpilogue).
   */
  readonly epilogue?: {
    readonly kind: "bias" | "bgrad";
    readonly operand?: "a" | "b";
    readonly bias: { readonly dtype: GemmDType; readonly batchStride: number };
  };
}

/**
 * cuBLASLt's epilogues we use (cublasLtEpilogue_t, cublasLt.h / the cuBLASLt docs): BIAS adds a vector of
 * D-rows elements to every column of D; BGRADA writes, "independently" of D, the bias gradient of the
 * library's A: "the bias size corresponds to the number of rows of the matrix D; the reduction happens over
 * the GEMM's k dimension", i.e. bias[i] = Σ_p op(A)(i, p); BGRADB that of its B, "the number of columns of
 * the matrix D", bias[j] = Σ_p op(B)(p, j). Both store to CUBLASLT_MATMUL_DESC_BIAS_POINTER in
 * BIAS_DATA_TYPE. (apex's fused_dense backward uses BGRADB for a linear layer's db with OP_T on B.)
 */
export type LtEpilogueKind = "bias" | "bgrada" | "bgradb";

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
   * C, read with beta 1 where the plan gives one (the library's C, D's transpose as D is): absent, beta 0
   * and the call passes D's pointer and layout as C, which cuBLASLt then does not read.
   */
  readonly c?: LtLayout;
  readonly beta: 0 | 1;
  /**
   * The epilogue's vector: `length` elements, batch entries `batchStride` elements apart
   * (BIAS_BATCH_STRIDE). BIAS: added to every column of the library's D, one per row. Our bias runs over
   * D's columns (n), which are the rows of the library's n×m Dᵀ, so it is that vector as it is, length n.
   * A bias gradient: our operand "b" is the library's A (BGRADA, over the library D's n rows: length n),
   * our "a" its B (BGRADB, over its m columns: length m); see `ltEpilogue`.
   */
  readonly bias?: {
    readonly kind: LtEpilogueKind;
    readonly dtype: GemmDType;
    readonly length: number;
    readonly batchStride: number;
  };
}

/**
 * The library epilogue of a plan GEMM's: BIAS as it is; a bias gradient of our B (Σ_p op(B)[p][j], j < n)
 * is one of the library's A, since LtCall passes our B as its A (Dᵀ = op(B)ᵀ·op(A)ᵀ): op_lib(A) = op(B)ᵀ,
 * so Σ_p op_lib(A)(j, p) = Σ_p op(B)[p][j], over the n rows of the library's D: BGRADA. Ours of A is its
 * B's: BGRADB, over the library D's m columns.
 */
export function ltEpilogue(
  e: NonNullable<RowMajorGemm["epilogue"]>,
  m: number,
  n: number,
) {
  if (e.kind === "bias") return { kind: "bias" as const, length: n };
  if (e.operand === "b") return { kind: "bgrada" as const, length: n };
  if (e.operand === "a") return { kind: "bgradb" as const, length: m };
  throw new Error("a bgrad epilogue names no operand");
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
  const vector = spec.epilogue;
  // Groups are separate calls with the same bias pointer: a vector stepped per entry cannot follow them.
  if ((spec.outer ?? 1) > 1 && (vector?.bias.batchStride ?? 0) !== 0) {
    throw new Error("a bias stepped per batch entry in a call in groups (plan GEMMs never have one)");
  }
  // cuBLASLt takes C in D's type; in place (C = D) it also needs D's layout, which plans keep for any C.
  if (spec.c && (spec.c.dtype !== spec.d.dtype || spec.c.ld !== spec.d.ld)) {
    throw new Error("C differs from D in type or leading dimension (plan GEMMs never have one)");
  }
  // A bias gradient sums one call's operand: plans give it one batch entry (gemm_bgrad.ts).
  if (spec.epilogue?.kind === "bgrad" && spec.batch !== 1) {
    throw new Error("a bias-gradient epilogue on a batched call (plan GEMMs never have one)");
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
    ...(spec.c ? { c: layout(spec.c, n, m) } : {}),
    beta: spec.c ? 1 : 0,
    ...(vector
      ? {
        bias: {
          ...ltEpilogue(vector, m, n),
          dtype: vector.bias.dtype,
          batchStride: vector.bias.batchStride,
        },
      }
      : {}),
  };
}
