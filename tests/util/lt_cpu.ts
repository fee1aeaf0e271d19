/**
 * cublasLtMatmul as its documentation defines it, in host C++ for the CPU shim (tests/util/cuda_cpu.ts):
 * column-major layouts (rows, cols, leading dimension, batch count and stride), TRANSA/TRANSB, alpha 1,
 * beta 0 or 1 (C with its own layout, of D's type, added to the f32 accumulator before D's rounding), f32
 * accumulation, the BIAS epilogue (a vector over the library D's rows, stepped per batch
 * entry) and the bias-gradient epilogues BGRADA / BGRADB (the sums over k of op(A)'s rows, as many as D's
 * rows, or of op(B)'s columns, as many as D's columns, written to the vector). The shim hands it the descriptors LtCall makes (runtime/cuda/lt_mapping.ts), pointers swapped
 * as LtCall swaps them, so a plan's library GEMMs on the shim check the row-major to
 * column-major mapping end to end against the reference interpreter. Layouts whose shapes do not fit
 * the operation abort, as cuBLASLt refuses them (CUBLAS_STATUS_INVALID_VALUE).
 */
import { ltDescriptors, type LtLayout, type RowMajorGemm } from "../../runtime/cuda/lt_mapping.ts";

export const LT_CPU = String.raw`
// For batch q: D(i,j) = sum_p op(A)(i,p) * op(B)(p,j), i < m, j < n; X(r,c) = X[q*stride + r + c*ld].
// ep (cublasLtEpilogue_t): 1 none; 4 CUBLASLT_EPILOGUE_BIAS: bias[q*sbias + i] is added to row i of every
// column of batch entry q (BIAS_BATCH_STRIDE sbias), in f32 before D's rounding; its length, nbias, must be
// D's rows. 256 BGRADA: bias[i] = sum_p op(A)(i,p), nbias = D's rows; 512 BGRADB: bias[j] = sum_p
// op(B)(p,j), nbias = D's columns ("the reduction happens over the GEMM's k dimension"), f32 sums stored
// in the bias type; one batch entry. beta 1: C(i,j) = C[q*sc + i + j*ldc] is added before D's rounding
// (its layout must be D's shape and batch; beta 0: C is not read).
template <typename TA, typename TB, typename TD, typename TBias>
static void bf_lt_matmul(long m, long n, long k, bool ta, bool tb, const TA* A, long ar, long ac, long lda,
                         long ab, long sa, const TB* B, long br, long bc, long ldb, long bb, long sb, TD* D,
                         long dr, long dc, long ldd, long db, long sd, int ep, const TBias* bias, long nbias,
                         long sbias, float beta = 0.0f, const TD* C = nullptr, long cr = 0, long cc = 0,
                         long ldc = 0, long cb = 0, long sc = 0) {
  const bool bgrad = ep == 256 || ep == 512;
  if ((ta ? ac : ar) != m || (ta ? ar : ac) != k || (tb ? bc : br) != k || (tb ? br : bc) != n || dr != m ||
      dc != n || lda < ar || ldb < br || ldd < dr || ab != bb || ab != db || (ep != 1 && !bias) ||
      (beta != 0.0f && (!C || cr != dr || cc != dc || ldc < cr || cb != db)) ||
      (ep == 4 && nbias != dr) || (ep == 256 && nbias != dr) || (ep == 512 && nbias != dc) ||
      (bgrad && db != 1) || (ep != 1 && ep != 4 && !bgrad)) {
    std::fprintf(stderr, "bf_lt_matmul: layouts do not fit m %ld n %ld k %ld (epilogue %d)\n", m, n, k, ep);
    std::abort();
  }
  const auto a_at = [&](long q, long i, long p) { return bf_to_f32(A[q * sa + (ta ? p + i * lda : i + p * lda)]); };
  const auto b_at = [&](long q, long p, long j) { return bf_to_f32(B[q * sb + (tb ? j + p * ldb : p + j * ldb)]); };
  for (long q = 0; q < db; ++q)
    for (long j = 0; j < n; ++j)
      for (long i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (long p = 0; p < k; ++p) acc += a_at(q, i, p) * b_at(q, p, j);
        if (beta != 0.0f) acc += beta * bf_to_f32(C[q * sc + i + j * ldc]);
        if (ep == 4) acc += bf_to_f32(bias[q * sbias + i]);
        bf_from_f32(acc, &D[q * sd + i + j * ldd]);
      }
  // The vector is written, not read: the plan's memory behind it is not const.
  TBias* out = const_cast<TBias*>(bias);
  if (ep == 256)
    for (long i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (long p = 0; p < k; ++p) acc += a_at(0, i, p);
      bf_from_f32(acc, &out[i]);
    }
  if (ep == 512)
    for (long j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (long p = 0; p < k; ++p) acc += b_at(0, p, j);
      bf_from_f32(acc, &out[j]);
    }
}
`;

/** cublasLtEpilogue_t values (cublasLt.h): NONE (DEFAULT) 1, BIAS 4, BGRADA 256, BGRADB 512. */
const LT_EPILOGUE = { bias: 4, bgrada: 256, bgradb: 512 } as const;

/**
 * The C++ call for one group of a plan GEMM: `a`, `b`, `d` are the row-major operands' pointer
 * expressions; the library's A is our B and its B our A (LtCall's swap). `bias`: the bias vector's
 * pointer expression, for a call with an epilogue (BIAS reads it, BGRADA/BGRADB write it; its length is the
 * descriptors' own). `c`: C's pointer expression, for a call with C (beta 1, C's layout the descriptors').
 */
export function ltCallCpp(
  call: RowMajorGemm,
  a: string,
  b: string,
  d: string,
  bias?: string,
  c?: string,
): string {
  const lt = ltDescriptors(call);
  if ((lt.bias === undefined) !== (bias === undefined)) {
    throw new Error(`ltCallCpp: a bias pointer ${bias ? "without" : "is needed for"} a BIAS epilogue`);
  }
  if ((lt.c === undefined) !== (c === undefined)) {
    throw new Error(`ltCallCpp: a C pointer ${c ? "without" : "is needed for"} a call with C`);
  }
  const layout = (l: LtLayout) => `${l.rows}, ${l.cols}, ${l.ld}, ${l.batch}, ${l.batch > 1 ? l.stride : 0}`;
  const ep = lt.bias
    ? `${LT_EPILOGUE[lt.bias.kind]}, ${bias}, ${lt.bias.length}, ${lt.bias.batchStride}`
    : "1, static_cast<const float*>(nullptr), 0, 0";
  return `bf_lt_matmul(${lt.m}, ${lt.n}, ${lt.k}, ${lt.transA}, ${lt.transB}, ${b}, ${layout(lt.a)}, ${a}, ${
    layout(lt.b)
  }, ${d}, ${layout(lt.d)}, ${ep}${lt.c ? `, ${lt.beta}.0f, ${c}, ${layout(lt.c)}` : ""});`;
}
