/**
 * The fake CUDA libraries the CI-side tests run the real FFI paths against: a fake libcuda (device memory
 * is host memory; kernels do not run, each launch is recorded) and a fake NVRTC, C compiled here against
 * the toolkit's cuda.h so every fake function has the real prototype (a mismatch is a compile error).
 * Used by the fake-driver test, the fake-cuBLASLt test and the GPU-run rehearsal.
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
      args: ["-shared", "-fPIC", "-O1", `-I${inc}`, "-o", `${dir}/${lib}`, `${dir}/${lib}.c`],
      stdout: "piped",
      stderr: "piped",
    }).output().catch(() => undefined);
    if (!r) return "no gcc";
    if (!r.success) throw new Error(`fake ${lib} did not build:\n${new TextDecoder().decode(r.stderr)}`);
  }
  return undefined;
}
