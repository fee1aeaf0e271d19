/**
 * The CPU backend's own sgemm, for machines without OpenBLAS (pool.ts appends it to pool.c, whose
 * `bf_gemm_own` runs it per block as `bf_gemm` runs OpenBLAS's). Without it a GEMM ran as the C template kernel,
 * a GPU-shaped tiling, and BERT-tiny pre-trained at 16 sequences/s on a 2-core VM where OpenBLAS gave 110.
 * The usual packed design: B in panels of KC x NC, A in blocks of MC x KC, both repacked into slivers
 * (MR rows of A, NR columns of B, zero-padded at the edges) that a register-tile kernel reads in order.
 * The vectors are GCC/Clang vector extensions, so -march=native picks AVX-512, AVX2 or SSE widths.
 * Each element's sum runs over k in KC blocks, in one order for a given shape: results are deterministic.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define BF_VL 16
#elif defined(__AVX__)
#define BF_VL 8
#else
#define BF_VL 4
#endif
// A register tile of 6 rows by 2 vectors: 12 accumulators, 2 loads of B and a broadcast of A fit the 16
// vector registers of AVX2 and SSE.
#define BF_MR 6
#define BF_NR (2 * BF_VL)
#define BF_KC 256
#define BF_MC 96
#define BF_NC 2048

typedef float bf_vf __attribute__((vector_size(BF_VL * 4)));

static inline bf_vf bf_load(const float* p) {
  bf_vf v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void bf_store(float* p, bf_vf v) { memcpy(p, &v, sizeof v); }

/** c (MR x NR at ldc) = or += the product of an A sliver and a B sliver over kc. */
static void bf_tile(int kc, const float* restrict a, const float* restrict b, float* restrict c, int ldc,
                    int add) {
  bf_vf acc[BF_MR][2] = {{0}};
  for (int p = 0; p < kc; ++p, a += BF_MR, b += BF_NR) {
    const bf_vf b0 = bf_load(b), b1 = bf_load(b + BF_VL);
    for (int r = 0; r < BF_MR; ++r) {
      acc[r][0] += a[r] * b0;
      acc[r][1] += a[r] * b1;
    }
  }
  for (int r = 0; r < BF_MR; ++r) {
    float* row = c + (int64_t)r * ldc;
    bf_store(row, add ? bf_load(row) + acc[r][0] : acc[r][0]);
    bf_store(row + BF_VL, add ? bf_load(row + BF_VL) + acc[r][1] : acc[r][1]);
  }
}

/** Slivers of NR columns of op(B)[p0 .. p0+kc, j0 .. j0+nc], zero past n. */
static void bf_pack_b(const float* b, int ldb, int tb, int p0, int kc, int j0, int nc, float* out) {
  for (int js = 0; js < nc; js += BF_NR) {
    const int w = nc - js < BF_NR ? nc - js : BF_NR;
    for (int p = 0; p < kc; ++p, out += BF_NR) {
      for (int j = 0; j < w; ++j) {
        out[j] = tb ? b[(int64_t)(j0 + js + j) * ldb + p0 + p] : b[(int64_t)(p0 + p) * ldb + j0 + js + j];
      }
      for (int j = w; j < BF_NR; ++j) out[j] = 0.0f;
    }
  }
}

/** Slivers of MR rows of op(A)[i0 .. i0+mc, p0 .. p0+kc], zero past m. */
static void bf_pack_a(const float* a, int lda, int ta, int i0, int mc, int p0, int kc, float* out) {
  for (int is = 0; is < mc; is += BF_MR) {
    const int h = mc - is < BF_MR ? mc - is : BF_MR;
    for (int p = 0; p < kc; ++p, out += BF_MR) {
      for (int i = 0; i < h; ++i) {
        out[i] = ta ? a[(int64_t)(p0 + p) * lda + i0 + is + i] : a[(int64_t)(i0 + is + i) * lda + p0 + p];
      }
      for (int i = h; i < BF_MR; ++i) out[i] = 0.0f;
    }
  }
}

/** Row-major c (m x n, ldc) = op(a) op(b); ta, tb: whether a and b are stored transposed. */
static void bf_own_sgemm(int ta, int tb, int m, int n, int k, const float* a, int lda, const float* b,
                         int ldb, float* c, int ldc) {
  // Per thread (the pool's helpers live as long as the process): an A block and a B panel.
  static _Thread_local float *pa, *pb;
  if (!pa) pa = aligned_alloc(64, sizeof(float) * BF_MC * BF_KC);
  if (!pb) pb = aligned_alloc(64, sizeof(float) * BF_KC * (BF_NC + BF_NR));
  if (!pa || !pb || k == 0) {  // no memory for the packs (or nothing to sum): plain loops, slow but right
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int p = 0; p < k; ++p) {
          s += (ta ? a[(int64_t)p * lda + i] : a[(int64_t)i * lda + p]) *
               (tb ? b[(int64_t)j * ldb + p] : b[(int64_t)p * ldb + j]);
        }
        c[(int64_t)i * ldc + j] = s;
      }
    }
    return;
  }
  float edge[BF_MR * BF_NR];
  for (int j0 = 0; j0 < n; j0 += BF_NC) {
    const int nc = n - j0 < BF_NC ? n - j0 : BF_NC;
    for (int p0 = 0; p0 < k; p0 += BF_KC) {
      const int kc = k - p0 < BF_KC ? k - p0 : BF_KC, add = p0 > 0;
      bf_pack_b(b, ldb, tb, p0, kc, j0, nc, pb);
      for (int i0 = 0; i0 < m; i0 += BF_MC) {
        const int mc = m - i0 < BF_MC ? m - i0 : BF_MC;
        bf_pack_a(a, lda, ta, i0, mc, p0, kc, pa);
        for (int js = 0; js < nc; js += BF_NR) {
          const int w = nc - js < BF_NR ? nc - js : BF_NR;
          for (int is = 0; is < mc; is += BF_MR) {
            const int h = mc - is < BF_MR ? mc - is : BF_MR;
            const float *sa = pa + (int64_t)is * kc, *sb = pb + (int64_t)js * kc;
            float* out = c + (int64_t)(i0 + is) * ldc + j0 + js;
            if (h == BF_MR && w == BF_NR) {
              bf_tile(kc, sa, sb, out, ldc, add);
              continue;
            }
            // An edge tile: computed whole into a scratch tile, its valid part added or stored.
            bf_tile(kc, sa, sb, edge, BF_NR, 0);
            for (int i = 0; i < h; ++i) {
              for (int j = 0; j < w; ++j) {
                out[(int64_t)i * ldc + j] = (add ? out[(int64_t)i * ldc + j] : 0.0f) + edge[i * BF_NR + j];
              }
            }
          }
        }
      }
    }
  }
}
