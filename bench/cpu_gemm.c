/*
 * The CPU backend's GEMMs at BERT-base's shapes against the library's own peak (issue 30: each GEMM at
 * >= 90 % of what the same BLAS reaches on a square 2048³ sgemm with the same threads). Built by
 * bench/cpu_gemm.sh with runtime/cpu/pool.c and sgemm.c, the code a plan's GEMM calls run through.
 *
 * For each shape: `pool` is pool.c's bf_gemm on OpenBLAS (single-threaded sgemm per block, as a plan runs
 * it), `onednn` the same on oneDNN's dnnl_sgemm (what plans run where oneDNN is installed; "-" where it is
 * not), `own` the same on sgemm.c, `blas` OpenBLAS's own threading on the whole call; `warm` repeats one
 * weight (in cache after the first call), `cold` cycles through copies of it in 453 MB, as a step reads each
 * weight once. GFLOP/s of the best of the repetitions, then the percentage of the same library's 2048³ sgemm on
 * its own threads (issue 30's measure: OpenBLAS's for pool, own and blas, oneDNN's for onednn), measured again at
 * the end: in a virtual machine the clock drifts between minutes.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int bf_pool_init(int threads, const char* blas, const char* onednn);
int bf_pool_threads(void);
int bf_gemm(const int64_t* d, int engine);
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                         float*, int);
typedef int (*dnnl_fn)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                       float, float*, int64_t);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define COPIES 48
#define WEIGHT ((size_t)3072 * 768)
enum { POOL, ONEDNN, OWN, BLAS, DNNL };
static const int ENGINE[] = {0, 2, 1}; /* pool.c's BF_OPENBLAS, BF_ONEDNN, BF_OWN */
static sgemm_fn sgemm;
static dnnl_fn dnnl;
static void (*blas_threads)(int), (*omp_threads)(int);
static float *A, *W, *D;

/** OpenBLAS's own thread count (the OpenMP build reads the calling thread's OpenMP setting). */
static void use_threads(int t) {
  if (blas_threads) blas_threads(t);
  if (omp_threads) omp_threads(t);
}

/** GFLOP/s of the best of `reps` calls of D (m x n) = op(A) op(B); tb: B stored [n, k] (a weight). */
static double rate(int how, int m, int n, int k, int ta, int tb, int cold, int reps) {
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    size_t size = (size_t)n * k, copies = WEIGHT * COPIES / size;
    const float* b = cold ? W + size * (r % copies) : W;
    int lda = ta ? m : k, ldb = tb ? k : n;
    int64_t d[12] = {ta ? 112 : 111, tb ? 112 : 111, m, n, k, lda, ldb, n, 1,
                     (int64_t)(intptr_t)A, (int64_t)(intptr_t)b, (int64_t)(intptr_t)D};
    double t0 = now();
    if (how == BLAS) sgemm(101, (int)d[0], (int)d[1], m, n, k, 1.0f, A, lda, b, ldb, 0.0f, D, n);
    else if (how == DNNL) dnnl(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, A, lda, b, ldb, 0.0f, D, n);
    else bf_gemm(d, ENGINE[how]);
    double t = now() - t0;
    if (r > 0 && t < best) best = t;  // the first call warms the code and the caches
  }
  return 2.0 * m * n * k / best * 1e-9;
}

int main(int argc, char** argv) {
  const char* lib = argc > 1 ? argv[1] : "libopenblas.so.0";
  int threads = argc > 2 ? atoi(argv[2]) : 2;
  const char* onednn = argc > 3 ? argv[3] : "libdnnl.so.2";
  void* dn = dlopen(onednn, RTLD_NOW | RTLD_LOCAL);
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h || !(sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm"))) {
    fprintf(stderr, "cpu_gemm: no OpenBLAS at %s (apt-get install libopenblas0-openmp)\n", lib);
    return 1;
  }
  omp_threads = (void (*)(int))dlsym(h, "omp_set_num_threads");
  if (!omp_threads && dn) omp_threads = (void (*)(int))dlsym(dn, "omp_set_num_threads");
  dnnl = dn ? (dnnl_fn)dlsym(dn, "dnnl_sgemm") : NULL;
  blas_threads = (void (*)(int))dlsym(h, "openblas_set_num_threads");
  char* (*core)(void) = (char* (*)(void))dlsym(h, "openblas_get_corename");
  A = malloc(4 * (size_t)3072 * 2048);
  W = malloc(4 * WEIGHT * COPIES);
  D = malloc(4 * (size_t)1024 * 30522);
  if (!A || !W || !D) return 1;
  for (size_t i = 0; i < (size_t)3072 * 2048; ++i) A[i] = (float)(i % 97) * 0.01f;
  for (size_t i = 0; i < WEIGHT * COPIES; ++i) W[i] = (float)(i % 89) * 0.01f;
  if (bf_pool_init(threads, lib, dn ? onednn : "") != 0) return 1;
  threads = bf_pool_threads();
  // OpenBLAS's own threading for the reference and the blas column; one thread per block for the pool's.
  use_threads(threads);
  // oneDNN's OpenMP build and OpenBLAS's share the process's libgomp: one thread setting serves both.
  double ref = rate(BLAS, 2048, 2048, 2048, 0, 0, 0, 4), dref = dnnl ? rate(DNNL, 2048, 2048, 2048, 0, 0, 0, 4) : 0;
  use_threads(1);
  printf("OpenBLAS %s, core %s, %d threads: 2048³ sgemm %.0f GFLOP/s (the reference of pool, own, blas)\n", lib,
         core ? core() : "?", threads, ref);
  // M = tokens (b1 s128, b8 s128) in the forward's x·Wᵀ and the backward's dY·W; n = 30522: the decoder
  // (the tied word embeddings); A transposed: dW = dYᵀ·x, m and n a weight's.
  static const int shapes[][5] = {
      {128, 768, 768, 0, 1},   {128, 3072, 768, 0, 1},  {128, 768, 3072, 0, 1},  {128, 30522, 768, 0, 1},
      {1024, 768, 768, 0, 1},  {1024, 3072, 768, 0, 1}, {1024, 768, 3072, 0, 1}, {1024, 30522, 768, 0, 1},
      {1024, 768, 3072, 0, 0}, {768, 768, 1024, 1, 0},  {768, 3072, 1024, 1, 0}, {3072, 768, 1024, 1, 0},
  };
  if (dnnl) printf("oneDNN %s, %d threads: 2048³ dnnl_sgemm %.0f GFLOP/s (the reference of onednn)\n", onednn,
                  threads, dref);
  else printf("oneDNN: not found at %s (apt-get install libdnnl2)\n", onednn);
  printf("%-22s %-6s %14s %14s %14s %14s\n", "m x n x k (A,B)", "weight", "pool", "onednn", "own", "blas");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    int m = shapes[i][0], n = shapes[i][1], k = shapes[i][2], ta = shapes[i][3], tb = shapes[i][4];
    for (int cold = 0; cold <= 1; ++cold) {
      char name[40];
      snprintf(name, sizeof name, "%dx%dx%d (%s,%s)", m, n, k, ta ? "T" : "N", tb ? "T" : "N");
      printf("%-22s %-6s", name, cold ? "cold" : "warm");
      int reps = (double)m * n * k > 1e9 ? 4 : 12;
      for (int how = POOL; how <= BLAS; ++how) {
        if (how == ONEDNN && !dnnl) {
          printf(" %14s", "-");
          continue;
        }
        if (how == BLAS) use_threads(threads);
        double g = rate(how, m, n, k, ta, tb, cold, reps);
        if (how == BLAS) use_threads(1);
        printf(" %6.0f (%3.0f%%)", g, 100 * g / (how == ONEDNN ? dref : ref));
      }
      printf("\n");
    }
  }
  use_threads(threads);
  printf("2048³ sgemm again: %.0f GFLOP/s", rate(BLAS, 2048, 2048, 2048, 0, 0, 0, 4));
  if (dnnl) printf(", dnnl_sgemm %.0f", rate(DNNL, 2048, 2048, 2048, 0, 0, 0, 4));
  printf("\n");
  return 0;
}
