/**
 * The fake CUDA libraries the CI-side tests run the real FFI paths against: a fake libcuda (device memory
 * is host memory; kernels do not run, each launch is recorded) and a fake NVRTC, C compiled here against
 * the toolkit's cuda.h so every fake function has the real prototype (a mismatch is a compile error).
 * Used by the fake-driver test, the fake-cuBLASLt tests and the GPU-run rehearsal; a fake libcublasLt
 * doing cuBLASLt's column-major arithmetic (FAKE_LT).
 */

export const FAKE_DRIVER = String.raw`
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Launch log: kernel params per launch, read back by the test through fake_* functions. */
typedef struct { unsigned g[3], b[3], shared; int nparams; uint64_t params[64]; } Launch;
static Launch launches[4096];
static int nlaunch = 0;
typedef struct { char *src; } Module;
typedef struct { int nparams; } Func;
/* A captured op: a launch (with its parameter values), a device-to-device copy (kind 1) or a memset (2). */
typedef struct { int kind; Launch l; uint64_t dst, src; size_t n; } Op;
typedef struct { Op ops[8192]; int n; } Graph;
static Graph *capturing = 0;
static int ctx_dummy, stream_count = 0, event_clock = 0, capture_began_at = -1, memsets = 0;

int fake_capture_began_at(void) { return capture_began_at; }
int fake_memset_count(void) { return memsets; }

int fake_launch_count(void) { return nlaunch; }
void fake_reset(void) { nlaunch = 0; }
/* out: g0 g1 g2 b0 b1 b2 shared nparams params... */
void fake_launch(int i, uint64_t *out) {
  Launch *l = &launches[i];
  for (int k = 0; k < 3; k++) { out[k] = l->g[k]; out[3 + k] = l->b[k]; }
  out[6] = l->shared; out[7] = (uint64_t)l->nparams;
  for (int k = 0; k < l->nparams; k++) out[8 + k] = l->params[k];
}

static const char *names[] = {"CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_OUT_OF_MEMORY"};
CUresult cuGetErrorName(CUresult e, const char **p) {
  if (e == 701) { *p = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"; return CUDA_SUCCESS; }
  if (e == 100) { *p = "CUDA_ERROR_NO_DEVICE"; return CUDA_SUCCESS; }
  if ((int)e < 3) { *p = names[e]; return CUDA_SUCCESS; }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult e, const char **p) { return cuGetErrorName(e, p); }
CUresult cuInit(unsigned int flags) {
  const char *e = getenv("FAKE_CUDA_INIT_ERROR");
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return e ? (CUresult)atoi(e) : CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { if (ordinal != 0) return CUDA_ERROR_INVALID_VALUE; *d = 0; return CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute a, CUdevice d) {
  if (d != 0) return CUDA_ERROR_INVALID_VALUE;
  if (a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) *pi = 9;
  else if (a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) *pi = 0;
  else if (a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) *pi = 132;
  else return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { strncpy(name, "Fake GPU", (size_t)len); return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = (CUcontext)&ctx_dummy; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c) { return c == (CUcontext)&ctx_dummy ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = (size_t)1 << 34; *t = (size_t)1 << 35; return CUDA_SUCCESS; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  void *m = aligned_alloc(256, (n + 255) / 256 * 256);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(m, 0xAB, n); /* garbage, so a missing cuMemsetD8 shows */
  *p = (CUdeviceptr)(uintptr_t)m; return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return CUDA_SUCCESS; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { memcpy((void *)(uintptr_t)d, s, n); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memcpy(d, (void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  if (!st) return CUDA_ERROR_INVALID_VALUE;
  if (capturing) { Op *o = &capturing->ops[capturing->n++]; o->kind = 1; o->dst = d; o->src = s; o->n = n; return CUDA_SUCCESS; }
  memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return CUDA_SUCCESS;
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { memset((void *)(uintptr_t)d, v, n); return CUDA_SUCCESS; }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
  if (!st) return CUDA_ERROR_INVALID_VALUE;
  if (capturing) { Op *o = &capturing->ops[capturing->n++]; o->kind = 2; o->dst = d; o->src = v; o->n = n; return CUDA_SUCCESS; }
  memsets++; memset((void *)(uintptr_t)d, v, n); return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream *s, unsigned int flags) { *s = (CUstream)malloc(16); stream_count++; return CUDA_SUCCESS; }
CUresult cuStreamDestroy_v2(CUstream s) { free(s); stream_count--; return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream s) { return capturing ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
CUresult cuEventCreate(CUevent *e, unsigned int flags) { *e = (CUevent)calloc(1, sizeof(int)); return CUDA_SUCCESS; }
CUresult cuEventDestroy_v2(CUevent e) { free(e); return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent e, CUstream s) { *(int *)e = ++event_clock; return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent e) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { *ms = 0.001f * (float)(*(int *)b - *(int *)a); return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  if (strncmp((const char *)image, "FAKECUBIN sm_90\n", 16) != 0) return CUDA_ERROR_INVALID_IMAGE;
  Module *mod = malloc(sizeof(Module)); mod->src = strdup((const char *)image + 16);
  *m = (CUmodule)mod; return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) { free(((Module *)m)->src); free(m); return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  const char *src = ((Module *)m)->src;
  char sig[128]; snprintf(sig, sizeof sig, " %s(", name);
  const char *at = strstr(src, sig);
  if (!at) return CUDA_ERROR_NOT_FOUND;
  Func *fn = malloc(sizeof(Func)); fn->nparams = 0;
  const char *close = strchr(at, ')');
  for (const char *c = at + strlen(sig); c < close; c++) if (*c == '*') fn->nparams++;
  *f = (CUfunction)fn; return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream st, void **params, void **extra) {
  if (!st || extra) return CUDA_ERROR_INVALID_VALUE;
  if (bx * by * bz > 1024 || gx == 7777) return (CUresult)701;
  Launch l = {{gx, gy, gz}, {bx, by, bz}, shared, ((Func *)f)->nparams, {0}};
  for (int i = 0; i < l.nparams; i++) l.params[i] = *(uint64_t *)params[i];
  if (capturing) { Op *o = &capturing->ops[capturing->n++]; o->kind = 0; o->l = l; return CUDA_SUCCESS; }
  launches[nlaunch++] = l; return CUDA_SUCCESS;
}
CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  if (capturing || mode > 2) return CUDA_ERROR_INVALID_VALUE;
  capture_began_at = nlaunch; capturing = calloc(1, sizeof(Graph)); return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
  if (!capturing) return CUDA_ERROR_INVALID_VALUE;
  *g = (CUgraph)capturing; capturing = 0; return CUDA_SUCCESS;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
  Graph *copy = malloc(sizeof(Graph)); memcpy(copy, g, sizeof(Graph)); *e = (CUgraphExec)copy; return CUDA_SUCCESS;
}
CUresult cuGraphDestroy(CUgraph g) { free(g); return CUDA_SUCCESS; }
CUresult cuGraphExecDestroy(CUgraphExec e) { free(e); return CUDA_SUCCESS; }
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  Graph *g = (Graph *)e;
  for (int i = 0; i < g->n; i++) {
    Op *o = &g->ops[i];
    if (o->kind == 0) launches[nlaunch++] = o->l;
    else if (o->kind == 2) { memsets++; memset((void *)(uintptr_t)o->dst, (int)o->src, o->n); }
    else memmove((void *)(uintptr_t)o->dst, (void *)(uintptr_t)o->src, o->n);
  }
  return CUDA_SUCCESS;
}
`;

/**
 * A fake libcublasLt.so: C that keeps every descriptor attribute LtCall sets, keyed by cublasLt.h's enum
 * values (CUDA 12.6 header: TRANSA 3, TRANSB 4, EPILOGUE 7 with BIAS = 4, BGRADA = 256, BGRADB = 512,
 * BIAS_POINTER 8, BIAS_BATCH_STRIDE 10, BIAS_DATA_TYPE 26; layout BATCH_COUNT 5, STRIDED_BATCH_OFFSET 6;
 * an attribute it does not know is CUBLAS_STATUS_INVALID_VALUE), and runs cublasLtMatmul as the
 * documentation defines it on host memory: column-major, batched, the BIAS epilogue's vector over D's rows
 * added before D's rounding; BGRADA / BGRADB write the sums over k of op(A)'s rows (D's rows of them) or of
 * op(B)'s columns (D's columns) to the bias pointer, in BIAS_DATA_TYPE; beta times C (with C's own layout,
 * which must have D's shape, batch and type) added before D's rounding. With FAKE_LT_NO_BGRAD set, the
 * heuristic finds no algorithm for a bias-gradient epilogue (a heuristic miss); with FAKE_LT_NO_C, none for
 * a C layout other than D's (a call with C: a heuristic miss).
 */
export const FAKE_LT = String.raw`
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int transa, transb; unsigned epilogue; uint64_t bias; int64_t bias_stride; int bias_type;
} Desc;
typedef struct { int type; uint64_t rows, cols; int64_t ld; int batch; int64_t stride; } Layout;
static int matmuls;
int fake_lt_matmuls(void) { return matmuls; }

int cublasLtCreate(void **h) { *h = malloc(8); return 0; }
int cublasLtDestroy(void *h) { free(h); return 0; }
size_t cublasLtGetVersion(void) { return 130000; }
int cublasLtMatmulDescCreate(Desc **d, int compute, int scale) {
  if (compute != 68 || scale != 0) return 7; /* CUBLAS_COMPUTE_32F, CUDA_R_32F */
  *d = calloc(1, sizeof(Desc)); (*d)->epilogue = 1; (*d)->bias_type = -1; return 0;
}
int cublasLtMatmulDescDestroy(Desc *d) { free(d); return 0; }
int cublasLtMatmulDescSetAttribute(Desc *d, int attr, const void *buf, size_t n) {
  switch (attr) {
    case 3: if (n != 4) return 7; memcpy(&d->transa, buf, 4); return 0;
    case 4: if (n != 4) return 7; memcpy(&d->transb, buf, 4); return 0;
    case 7: if (n != 4) return 7; memcpy(&d->epilogue, buf, 4); return 0;
    case 8: if (n != 8) return 7; memcpy(&d->bias, buf, 8); return 0;
    case 10: if (n != 8) return 7; memcpy(&d->bias_stride, buf, 8); return 0;
    case 26: if (n != 4) return 7; memcpy(&d->bias_type, buf, 4); return 0;
    default: return 7;
  }
}
int cublasLtMatrixLayoutCreate(Layout **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (ld < (int64_t)rows) return 7;
  *l = calloc(1, sizeof(Layout)); (*l)->type = type; (*l)->rows = rows; (*l)->cols = cols; (*l)->ld = ld;
  (*l)->batch = 1; return 0;
}
int cublasLtMatrixLayoutDestroy(Layout *l) { free(l); return 0; }
int cublasLtMatrixLayoutSetAttribute(Layout *l, int attr, const void *buf, size_t n) {
  if (attr == 5 && n == 4) { memcpy(&l->batch, buf, 4); return 0; }
  if (attr == 6 && n == 8) { memcpy(&l->stride, buf, 8); return 0; }
  return 7;
}
int cublasLtMatmulPreferenceCreate(void **p) { *p = malloc(8); return 0; }
int cublasLtMatmulPreferenceDestroy(void *p) { free(p); return 0; }
int cublasLtMatmulPreferenceSetAttribute(void *p, int attr, const void *buf, size_t n) { return 0; }

/* D = op(A)·op(B) must fit: m×k by k×n into m×n, every layout with the same batch count. */
static int fits(const Desc *d, const Layout *a, const Layout *b, const Layout *D) {
  uint64_t m = D->rows, n = D->cols, k = d->transa ? a->rows : a->cols;
  return (d->transa ? a->cols : a->rows) == m && (d->transb ? b->cols : b->rows) == k &&
         (d->transb ? b->rows : b->cols) == n && a->batch == b->batch && b->batch == D->batch;
}
int cublasLtMatmulAlgoGetHeuristic(void *h, Desc *d, Layout *a, Layout *b, Layout *c, Layout *D, void *pref,
                                   int want, uint8_t *results, int *count) {
  if (!fits(d, a, b, D)) return 7;
  memset(results, 0, 96);
  /* A heuristic miss: no algorithm (count 0) for a bias-gradient epilogue. */
  if ((d->epilogue == 256 || d->epilogue == 512) && getenv("FAKE_LT_NO_BGRAD")) { *count = 0; return 0; }
  if (c != D && getenv("FAKE_LT_NO_C")) { *count = 0; return 0; }
  *count = 1; return 0; /* state (offset 72) CUBLAS_STATUS_SUCCESS */
}

static float half_to_f32(uint16_t h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static uint16_t f32_to_half(float f) { _Float16 x = (_Float16)f; uint16_t h; memcpy(&h, &x, 2); return h; }
static float load(int type, const void *p, int64_t i) {
  if (type == 0) return ((const float *)p)[i];
  if (type == 2) return half_to_f32(((const uint16_t *)p)[i]);
  uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16; float f; memcpy(&f, &bits, 4); return f;
}
static void store(int type, void *p, int64_t i, float v) {
  if (type == 0) { ((float *)p)[i] = v; return; }
  if (type == 2) { ((uint16_t *)p)[i] = f32_to_half(v); return; }
  uint32_t bits; memcpy(&bits, &v, 4); bits += 0x7fff + ((bits >> 16) & 1); ((uint16_t *)p)[i] = bits >> 16;
}

int cublasLtMatmul(void *h, Desc *d, const void *alpha, const void *A, Layout *a, const void *B, Layout *b,
                   const void *beta, const void *C, Layout *c, void *D, Layout *dl, const void *algo,
                   void *ws, size_t wsBytes, void *stream) {
  if (!fits(d, a, b, dl)) return 7;
  const float al = *(const float *)alpha, be = *(const float *)beta;
  /* beta != 0: C is read with its own layout, which must have D's shape, batch and type. */
  if (be != 0.0f && (!C || c->rows != dl->rows || c->cols != dl->cols || c->batch != dl->batch ||
                     c->type != dl->type)) return 7;
  const unsigned ep = d->epilogue;
  if (ep != 1 && ep != 4 && ep != 256 && ep != 512) return 15; /* NOT_SUPPORTED */
  if (ep != 1 && !d->bias) return 7;
  if ((ep == 256 || ep == 512) && dl->batch != 1) return 15;
  const int bias_type = d->bias_type == -1 ? dl->type : d->bias_type;
  const int64_t m = dl->rows, n = dl->cols, k = d->transa ? a->rows : a->cols;
  matmuls++;
  for (int q = 0; q < dl->batch; ++q)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int64_t p = 0; p < k; ++p) {
          const float x = load(a->type, A, q * a->stride + (d->transa ? p + i * a->ld : i + p * a->ld));
          const float y = load(b->type, B, q * b->stride + (d->transb ? j + p * b->ld : p + j * b->ld));
          acc += x * y;
        }
        float v = al * acc;
        if (be != 0.0f) v += be * load(c->type, C, q * c->stride + i + j * c->ld);
        if (ep == 4) v += load(bias_type, (const void *)(uintptr_t)d->bias, q * d->bias_stride + i);
        store(dl->type, D, q * dl->stride + i + j * dl->ld, v);
      }
  /* The bias gradient, from the operands as the call reads them: over k of op(A) (BGRADA, one per row of
     D) or of op(B) (BGRADB, one per column of D). */
  void *bias = (void *)(uintptr_t)d->bias;
  if (ep == 256)
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += load(a->type, A, d->transa ? p + i * a->ld : i + p * a->ld);
      store(bias_type, bias, i, acc);
    }
  if (ep == 512)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += load(b->type, B, d->transb ? j + p * b->ld : p + j * b->ld);
      store(bias_type, bias, j, acc);
    }
  return 0;
}
`;

/** NVRTC's documented prototypes (nvrtc.h is not installed here); the "CUBIN" is a tag plus the source. */
export const FAKE_NVRTC = String.raw`
#include <stdlib.h>
#include <string.h>
typedef struct { char *src; char *log; char *cubin; } Prog;
static int compiles = 0;
int fake_compile_count(void) { return compiles; }
int nvrtcVersion(int *major, int *minor) { *major = 13; *minor = 0; return 0; }
const char *nvrtcGetErrorString(int r) { return r == 6 ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR"; }
int nvrtcCreateProgram(Prog **p, const char *src, const char *name, int nh, const char *const *h, const char *const *inc) {
  if (nh != 0 || h || inc || !name) return 3;
  *p = calloc(1, sizeof(Prog)); (*p)->src = strdup(src); return 0;
}
int nvrtcCompileProgram(Prog *p, int n, const char *const *opts) {
  compiles++;
  int arch = 0;
  for (int i = 0; i < n; i++) if (strcmp(opts[i], "--gpu-architecture=sm_90") == 0) arch = 1;
  if (!arch) { p->log = strdup("fake nvrtc: no --gpu-architecture=sm_90"); return 5; }
  const char *err = strstr(p->src, "#error");
  if (err) { p->log = strdup("kernel.cu(3): error: planted #error"); return 6; }
  p->cubin = malloc(strlen(p->src) + 17);
  strcpy(p->cubin, "FAKECUBIN sm_90\n"); strcat(p->cubin, p->src);
  return 0;
}
int nvrtcGetCUBINSize(Prog *p, size_t *n) { *n = strlen(p->cubin) + 1; return 0; }
int nvrtcGetCUBIN(Prog *p, char *out) { strcpy(out, p->cubin); return 0; }
int nvrtcGetProgramLogSize(Prog *p, size_t *n) { *n = p->log ? strlen(p->log) + 1 : 1; return 0; }
int nvrtcGetProgramLog(Prog *p, char *out) { strcpy(out, p->log ? p->log : ""); return 0; }
int nvrtcDestroyProgram(Prog **p) { free((*p)->src); free((*p)->log); free((*p)->cubin); free(*p); *p = 0; return 0; }
`;

/** The CUDA toolkit's include folder (for cuda.h), or undefined where it is not installed. */
export function cudaInclude(): string | undefined {
  const roots = [Deno.env.get("CUDA_HOME"), "/usr/local/cuda", "/usr/local/cuda-13.0"].filter(Boolean);
  for (const r of roots) {
    try {
      if (Deno.statSync(`${r}/include/cuda.h`).isFile) return `${r}/include`;
    } catch {
      // next
    }
  }
  return undefined;
}

/**
 * Compiles each library's C (by file name, e.g. "libcuda.so.1") into `dir` with gcc. Returns why it could
 * not (no cuda.h, no gcc), or undefined once all are built; a fake that does not compile throws.
 */
export async function buildFakeLibs(dir: string, libs: Record<string, string>): Promise<string | undefined> {
  const inc = cudaInclude();
  if (!inc) return "no cuda.h (CUDA toolkit headers) found";
  for (const [lib, source] of Object.entries(libs)) {
    await Deno.writeTextFile(`${dir}/${lib}.c`, source);
    // No -Werror: a prototype that differs from cuda.h's is an error by itself ("conflicting types").
    const r = await new Deno.Command("gcc", {
      args: ["-shared", "-fPIC", "-O1", `-I${inc}`, "-o", `${dir}/${lib}`, `${dir}/${lib}.c`, "-lm"],
      stdout: "piped",
      stderr: "piped",
    }).output().catch(() => undefined);
    if (!r) return "no gcc";
    if (!r.success) throw new Error(`fake ${lib} did not build:\n${new TextDecoder().decode(r.stderr)}`);
  }
  return undefined;
}
