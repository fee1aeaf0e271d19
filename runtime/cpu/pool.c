/**
 * The CPU backend's thread pool, in C (pool.ts builds it once per process and every kernel library
 * links it): `bf_parallel(body, args, n)` runs body(args, lo, hi) over [0, n) in chunks that
 * the calling thread and the pool's helpers claim one at a time; `bf_gemm` runs a library GEMM as
 * single-threaded sgemm calls on blocks of the result, claimed the same way: oneDNN's `dnnl_sgemm`,
 * OpenBLAS's, or the backend's own (sgemm.c, which pool.ts appends to this file). Not OpenMP: the caller waits
 * only for chunks a helper has claimed, which matters on shared cores (DESIGN.md, notes: runtime/cpu/pool.c).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef void (*bf_body_fn)(void* const*, int, int);
typedef void (*bf_sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                            float, float*, int);

#define BF_GEN(s) ((uint32_t)((s) >> 40))
#define BF_CHUNKS(s) ((uint32_t)(((s) >> 20) & 0xFFFFF))
#define BF_NEXT(s) ((uint32_t)((s) & 0xFFFFF))
#define BF_PACK(g, c, n) (((uint64_t)((g) & 0xFFFFFF) << 40) | ((uint64_t)(c) << 20) | (uint64_t)(n))
// Chunks per thread: enough that a thread arriving late still finds work, few enough to claim cheaply.
#define BF_CHUNKS_PER_THREAD 8
// How long a helper spins for the next job before it sleeps (nanoseconds), about as long as libgomp's
// default. In a virtual machine a core whose threads all sleep is handed back to the host, and waking
// it again took milliseconds at times: with 0.2 ms the unfused BERT-tiny step took 100 ms in such
// minutes against 70 ms with 3 ms (alternating runs, load 1.5).
#define BF_SPIN_NS 3000000

static int bf_threads = 1;
static _Atomic int bf_busy;
static _Atomic(bf_body_fn) bf_job_fn;
static _Atomic(void* const*) bf_job_args;
static _Atomic int bf_job_n, bf_job_grain;
static _Atomic uint64_t bf_state;
static _Atomic int bf_done;
static _Atomic uint32_t bf_bell;
static _Atomic int bf_sleepers;
static bf_sgemm_fn bf_sgemm;
static int (*bf_dnnl)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                      float, float*, int64_t);
static void bf_own_sgemm(int ta, int tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                         float* c, int ldc);
static void (*bf_omp_threads)(int);

static inline void bf_pause(void) { __builtin_ia32_pause(); }

static int64_t bf_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/** Runs chunks of job g while any is left; returns when none is (or the job is no longer g). */
static void bf_work(uint32_t g) {
  bf_body_fn fn = atomic_load_explicit(&bf_job_fn, memory_order_relaxed);
  void* const* args = atomic_load_explicit(&bf_job_args, memory_order_relaxed);
  int n = atomic_load_explicit(&bf_job_n, memory_order_relaxed);
  int grain = atomic_load_explicit(&bf_job_grain, memory_order_relaxed);
  uint64_t s = atomic_load_explicit(&bf_state, memory_order_acquire);
  while (BF_GEN(s) == (g & 0xFFFFFF) && BF_NEXT(s) < BF_CHUNKS(s)) {
    if (atomic_compare_exchange_weak_explicit(&bf_state, &s, s + 1, memory_order_acq_rel,
                                              memory_order_acquire)) {
      int lo = (int)BF_NEXT(s) * grain, hi = lo + grain < n ? lo + grain : n;
      fn(args, lo, hi);
      atomic_fetch_add_explicit(&bf_done, 1, memory_order_release);
      s = atomic_load_explicit(&bf_state, memory_order_acquire);
    }
  }
}

static void* bf_helper(void* unused) {
  (void)unused;
  // oneDNN and OpenBLAS's OpenMP build take their thread count from the calling thread's OpenMP setting.
  if (bf_omp_threads) bf_omp_threads(1);
  uint32_t seen = BF_GEN(atomic_load(&bf_state));
  for (;;) {
    uint64_t s = atomic_load_explicit(&bf_state, memory_order_acquire);
    int64_t t0 = bf_now();
    for (int i = 1; BF_GEN(s) == seen; ++i) {
      bf_pause();
      s = atomic_load_explicit(&bf_state, memory_order_acquire);
      // No sched_yield here or below: with a second process on the core, yielding hands it the rest
      // of a time slice (milliseconds), often just before the next job or chunk comes.
      if ((i & 255) == 0 && bf_now() - t0 > BF_SPIN_NS) break;
    }
    while (BF_GEN(s) == seen) {
      // Sleep. The caller bumps the bell after publishing a job when it sees a sleeper; either it sees
      // this count or this thread sees its job (both sides sequentially consistent).
      uint32_t bell = atomic_load(&bf_bell);
      atomic_fetch_add(&bf_sleepers, 1);
      s = atomic_load(&bf_state);
      if (BF_GEN(s) == seen) syscall(SYS_futex, &bf_bell, FUTEX_WAIT_PRIVATE, bell, NULL, NULL, 0);
      atomic_fetch_sub(&bf_sleepers, 1);
      s = atomic_load(&bf_state);
    }
    seen = BF_GEN(s);
    bf_work(seen);
  }
  return NULL;
}

/** The library at `path` (empty: none), and its OpenMP runtime's thread setter (see bf_helper). */
static void* bf_library(const char* path) {
  void* h = path && path[0] ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (h && !bf_omp_threads) bf_omp_threads = (void (*)(int))dlsym(h, "omp_set_num_threads");
  return h;
}

/**
 * Starts the helpers (threads - 1 of them) once; blas, onednn: OpenBLAS's and oneDNN's paths, or empty.
 * 0 on success, 1 when a library given could not be opened or has not its sgemm.
 */
int bf_pool_init(int threads, const char* blas, const char* onednn) {
  static int started;
  if (started) return 0;
  started = 1;
  void *b = bf_library(blas), *o = bf_library(onednn);
  bf_sgemm = b ? (bf_sgemm_fn)dlsym(b, "cblas_sgemm") : NULL;
  bf_dnnl = o ? (__typeof__(bf_dnnl))dlsym(o, "dnnl_sgemm") : NULL;
  if ((blas && blas[0] && !bf_sgemm) || (onednn && onednn[0] && !bf_dnnl)) return 1;
  // Every GEMM block is one single-threaded sgemm; the pool runs the blocks in parallel.
  void (*set)(int) = b ? (void (*)(int))dlsym(b, "openblas_set_num_threads") : NULL;
  if (set) set(1);
  if (bf_omp_threads) bf_omp_threads(1);
  bf_threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
  for (int i = 1; i < bf_threads; ++i) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, bf_helper, NULL) != 0) bf_threads = i;
    pthread_attr_destroy(&a);
  }
  return 0;
}

int bf_pool_threads(void) { return bf_threads; }

/** body(args, lo, hi) over [0, n), in parallel when there are helpers; returns when all of it ran. */
void bf_parallel(bf_body_fn fn, void* const* args, int n) {
  if (n <= 0) return;
  // One job at a time: a second caller (another JavaScript worker) runs its job alone.
  if (bf_threads <= 1 || n == 1 || atomic_exchange(&bf_busy, 1)) {
    fn(args, 0, n);
    return;
  }
  int chunks = bf_threads * BF_CHUNKS_PER_THREAD;
  if (chunks > n) chunks = n;
  int grain = (n + chunks - 1) / chunks;
  chunks = (n + grain - 1) / grain;
  atomic_store_explicit(&bf_job_fn, fn, memory_order_relaxed);
  atomic_store_explicit(&bf_job_args, args, memory_order_relaxed);
  atomic_store_explicit(&bf_job_n, n, memory_order_relaxed);
  atomic_store_explicit(&bf_job_grain, grain, memory_order_relaxed);
  atomic_store_explicit(&bf_done, 0, memory_order_relaxed);
  uint32_t g = (BF_GEN(atomic_load(&bf_state)) + 1) & 0xFFFFFF;
  atomic_store(&bf_state, BF_PACK(g, (uint32_t)chunks, 0));
  if (atomic_load(&bf_sleepers) > 0) {
    atomic_fetch_add(&bf_bell, 1);
    syscall(SYS_futex, &bf_bell, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
  }
  bf_work(g);
  // Only chunks a helper claimed and is running remain.
  while (atomic_load_explicit(&bf_done, memory_order_acquire) < chunks) bf_pause();
  atomic_store_explicit(&bf_busy, 0, memory_order_release);
}

/*
 * A library GEMM on `engine`: d = [ta, tb, m, n, k, lda, ldb, ldd, batch, then A, B, D addresses per batch
 * entry], row-major D = op(A) op(B), alpha 1, beta 0. Each entry is cut into blocks of D's rows (or columns,
 * whichever D has more of); every block is one sgemm over the whole k, so an element's sum is the same
 * single-threaded computation wherever its block runs, and the blocks depend on the shape only.
 */
#define BF_GEMM_SERIAL 262144   /* m n k below which one sgemm on the calling thread is cheaper */
#define BF_GEMM_BLOCK 65536     /* the least m n k of a block */
#define CBLAS_ROW_MAJOR 101
#define CBLAS_TRANS 112
enum { BF_OPENBLAS, BF_OWN, BF_ONEDNN };

static void bf_gemm_block(const int64_t* d, int t, int parts, int engine) {
  int ta = (int)d[0], tb = (int)d[1], m = (int)d[2], n = (int)d[3], k = (int)d[4];
  int lda = (int)d[5], ldb = (int)d[6], ldd = (int)d[7];
  int e = t / parts, p = t % parts;
  const float* a = (const float*)(intptr_t)d[9 + 3 * e];
  const float* b = (const float*)(intptr_t)d[10 + 3 * e];
  float* c = (float*)(intptr_t)d[11 + 3 * e];
  if (parts > 1 && n > m) {
    int step = ((n + parts - 1) / parts + 15) / 16 * 16, lo = p * step, hi = lo + step < n ? lo + step : n;
    if (lo >= hi) return;
    b += tb == CBLAS_TRANS ? (int64_t)lo * ldb : lo;
    c += lo;
    n = hi - lo;
  } else if (parts > 1) {
    int step = ((m + parts - 1) / parts + 15) / 16 * 16, lo = p * step, hi = lo + step < m ? lo + step : m;
    if (lo >= hi) return;
    a += ta == CBLAS_TRANS ? lo : (int64_t)lo * lda;
    c += (int64_t)lo * ldd;
    m = hi - lo;
  }
  // dnnl_sgemm (row-major) fails only on arguments out of range, which a plan's shapes are not.
  if (engine == BF_ONEDNN)
    bf_dnnl(ta == CBLAS_TRANS ? 'T' : 'N', tb == CBLAS_TRANS ? 'T' : 'N', m, n, k, 1, a, lda, b, ldb, 0, c, ldd);
  else if (engine == BF_OWN) bf_own_sgemm(ta == CBLAS_TRANS, tb == CBLAS_TRANS, m, n, k, a, lda, b, ldb, c, ldd);
  else bf_sgemm(CBLAS_ROW_MAJOR, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldd);
}

static void bf_gemm_body(void* const* args, int lo, int hi) {
  const int64_t* d = (const int64_t*)args[0];
  int parts = (int)(intptr_t)args[1], engine = (int)(intptr_t)args[2];
  for (int t = lo; t < hi; ++t) bf_gemm_block(d, t, parts, engine);
}

/**
 * Blocks per batch entry: 1 when small, else one per thread, each at least BF_GEMM_BLOCK: every block packs
 * its own copy of the shared operand (DESIGN.md, notes: runtime/cpu/pool.c; deno task bench:gemm).
 */
static int bf_gemm_parts(const int64_t* d) {
  int64_t m = d[2], n = d[3], k = d[4], batch = d[8], work = m * n * k;
  if (bf_threads <= 1 || work * batch < BF_GEMM_SERIAL || batch >= bf_threads) return 1;
  int64_t parts = (bf_threads + batch - 1) / batch, rows = m > n ? m : n;
  if (parts > work / BF_GEMM_BLOCK) parts = work / BF_GEMM_BLOCK;
  if (parts > rows / 16) parts = rows / 16;
  return parts < 1 ? 1 : (int)parts;
}

/** 0 on success, 1 when the engine's library was not loaded (the backend's own sgemm always is). */
int bf_gemm(const int64_t* d, int engine) {
  if ((engine == BF_OPENBLAS && !bf_sgemm) || (engine == BF_ONEDNN && !bf_dnnl)) return 1;
  int parts = bf_gemm_parts(d), tasks = parts * (int)d[8];
  void* args[3] = {(void*)d, (void*)(intptr_t)parts, (void*)(intptr_t)engine};
  if (tasks == 1 || d[2] * d[3] * d[4] * d[8] < BF_GEMM_SERIAL) bf_gemm_body(args, 0, tasks);
  else bf_parallel(bf_gemm_body, args, tasks);
  return 0;
}

/*
 * The arena's pages faulted in before the first step, by the pool's threads: faulting them in as it ran made
 * BERT-base's first training step 1.8-2.3 times a steady one. MADV_POPULATE_WRITE (Linux 5.14) fills a range
 * in one call (a C harness, 3.2 GB: 0.73 s against 1.1-3.6 s with a fault per page); where it is refused,
 * each page is touched. The arena is zero when this runs, and writing a zero keeps it so.
 */
static void bf_populate_body(void* const* args, int lo, int hi) {
  char* p = (char*)args[0];
  int64_t end = (int64_t)(intptr_t)args[1], from = (int64_t)lo << 21, to = (int64_t)hi << 21;  // 2 MiB pieces
  if (to > end) to = end;
  if (madvise(p + from, to - from, 23 /* MADV_POPULATE_WRITE */) == 0) return;
  for (int64_t i = from; i < to; i += 4096) ((volatile char*)p)[i] = 0;
}

void bf_arena_prepare(char* p, int64_t bytes) {
  char* first = (char*)(((uintptr_t)p + 4095) & ~(uintptr_t)4095);
  int64_t span = p + bytes - first;
  void* args[2] = {first, (void*)(intptr_t)span};
  if (span > 0) bf_parallel(bf_populate_body, args, (int)((span + (1 << 21) - 1) >> 21));
}
