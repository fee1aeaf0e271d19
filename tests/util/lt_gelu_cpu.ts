/**
 * cuBLASLt's DGELU epilogue in host C++ for the CPU shim (tests/util/cuda_cpu.ts), beside the plain call
 * of lt_cpu.ts: for the library's column-major problem, D(i,j) = (Σ_p op(A)(i,p)·op(B)(p,j))·GELU'(x),
 * x = aux(i,j) = aux[i + j·ldaux] (the GELU input matrix, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, in
 * D's type), f32 throughout and D rounded once. GELU is the tanh form cuBLASLt computes
 * (compiler/lower/gemm_gelu.ts), so GELU'(x) = 0.5·(1 + t) + 0.5·x·(1 − t²)·c·(1 + 3a·x²) with
 * t = tanh(c·(x + a·x³)), c = √(2/π), a = 0.044715. The aux layout is checked as cublasLt.h states it
 * (ldaux divisible by 8 and no less than D's rows; one batch entry): a call the library would refuse
 * aborts. The pointers and layouts are LtCall's (runtime/cuda/lt_mapping.ts ltDescriptors), so a plan's
 * DGELU calls on the shim check the mapping and the formula against the reference interpreter.
 */
import { ltDescriptors, type LtLayout, type RowMajorGemm } from "../../runtime/cuda/lt_mapping.ts";

export const LT_GELU_CPU = String.raw`
template <typename TA, typename TB, typename TD>
static void bf_lt_matmul_dgelu(long m, long n, long k, bool ta, bool tb, const TA* A, long ar, long ac,
                               long lda, const TB* B, long br, long bc, long ldb, TD* D, long dr, long dc,
                               long ldd, const TD* aux, long ldaux) {
  if ((ta ? ac : ar) != m || (ta ? ar : ac) != k || (tb ? bc : br) != k || (tb ? br : bc) != n || dr != m ||
      dc != n || lda < ar || ldb < br || ldd < dr || !aux || ldaux % 8 != 0 || ldaux < dr) {
    std::fprintf(stderr, "bf_lt_matmul_dgelu: layouts do not fit m %ld n %ld k %ld ldaux %ld\n", m, n, k, ldaux);
    std::abort();
  }
  const float c = 0.7978845608028654f, a = 0.044715f;
  for (long j = 0; j < n; ++j)
    for (long i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (long p = 0; p < k; ++p)
        acc += bf_to_f32(A[ta ? p + i * lda : i + p * lda]) * bf_to_f32(B[tb ? j + p * ldb : p + j * ldb]);
      const float x = bf_to_f32(aux[i + j * ldaux]);
      const float t = tanhf(c * (x + a * x * x * x));
      const float slope = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * a * x * x);
      bf_from_f32(acc * slope, &D[i + j * ldd]);
    }
}

// GELU_AUX_BIAS: x = acc + bias[i] (bias over D's rows, nbias of them), aux(i,j) = x and D(i,j) = GELU(x),
// 0.5·x·(1 + tanh(c·(x + a·x³))), each rounded once to D's type.
template <typename TA, typename TB, typename TD, typename TBias>
static void bf_lt_matmul_gelu_aux_bias(long m, long n, long k, bool ta, bool tb, const TA* A, long ar, long ac,
                                       long lda, const TB* B, long br, long bc, long ldb, TD* D, long dr,
                                       long dc, long ldd, const TBias* bias, long nbias, TD* aux, long ldaux) {
  if ((ta ? ac : ar) != m || (ta ? ar : ac) != k || (tb ? bc : br) != k || (tb ? br : bc) != n || dr != m ||
      dc != n || lda < ar || ldb < br || ldd < dr || !aux || !bias || nbias != dr || ldaux % 8 != 0 ||
      ldaux < dr) {
    std::fprintf(stderr, "bf_lt_matmul_gelu_aux_bias: layouts do not fit m %ld n %ld k %ld\n", m, n, k);
    std::abort();
  }
  const float c = 0.7978845608028654f, a = 0.044715f;
  for (long j = 0; j < n; ++j)
    for (long i = 0; i < m; ++i) {
      float x = bf_to_f32(bias[i]);
      for (long p = 0; p < k; ++p)
        x += bf_to_f32(A[ta ? p + i * lda : i + p * lda]) * bf_to_f32(B[tb ? j + p * ldb : p + j * ldb]);
      bf_from_f32(x, &aux[i + j * ldaux]);
      bf_from_f32(0.5f * x * (1.0f + tanhf(c * (x + a * x * x * x))), &D[i + j * ldd]);
    }
}
`;

/**
 * The C++ call for a plan GEMM with a "gelu_aux_bias" epilogue: `bias` and `aux` are the vector's and the
 * GELU input matrix's pointer expressions.
 */
export function ltGeluAuxBiasCallCpp(
  call: RowMajorGemm,
  a: string,
  b: string,
  d: string,
  bias: string,
  aux: string,
): string {
  const lt = ltDescriptors(call);
  if (lt.aux?.kind !== "gelu_aux_bias" || !lt.bias) throw new Error("ltGeluAuxBiasCallCpp: no GELU_AUX_BIAS");
  const layout = (l: LtLayout) => `${l.rows}, ${l.cols}, ${l.ld}`;
  return `bf_lt_matmul_gelu_aux_bias(${lt.m}, ${lt.n}, ${lt.k}, ${lt.transA}, ${lt.transB}, ${b}, ${
    layout(lt.a)
  }, ${a}, ${layout(lt.b)}, ${d}, ${layout(lt.d)}, ${bias}, ${lt.bias.length}, ${aux}, ${lt.aux.ld});`;
}

/**
 * The C++ call for a plan GEMM with a "dgelu" epilogue: `a`, `b`, `d`, `aux` the row-major operands'
 * pointer expressions (the library's A is our B, its B our A, as LtCall passes them).
 */
export function ltDgeluCallCpp(call: RowMajorGemm, a: string, b: string, d: string, aux: string): string {
  const lt = ltDescriptors(call);
  if (lt.aux?.kind !== "dgelu") throw new Error("ltDgeluCallCpp: a call without a DGELU epilogue");
  const layout = (l: LtLayout) => `${l.rows}, ${l.cols}, ${l.ld}`;
  return `bf_lt_matmul_dgelu(${lt.m}, ${lt.n}, ${lt.k}, ${lt.transA}, ${lt.transB}, ${b}, ${
    layout(lt.a)
  }, ${a}, ${layout(lt.b)}, ${d}, ${layout(lt.d)}, ${aux}, ${lt.aux.ld});`;
}
