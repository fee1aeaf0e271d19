/*
 * NVRTC's C interface (the functions runtime/cuda/nvrtc.ts binds) carried out by nvcc, for packing a kernel
 * cache on a machine that has the CUDA compiler but no libnvrtc (bench/gpu_pack.sh builds it as
 * libnvrtc.so.<major> and puts it first on LD_LIBRARY_PATH for bench/gpu_precompile.ts only). NVRTC and nvcc
 * of one CUDA release share the front end (cicc) and ptxas, so the CUBIN is the one NVRTC would make, and
 * nvrtcVersion reports nvcc's release so the cache key is the GPU's NVRTC's when the releases agree.
 * Options are translated (--gpu-architecture=X -> -arch=X, --std=X -> -std=X); -I passes through.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { char *src, *log; unsigned char *cubin; size_t n; } Prog;

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  size_t got = fread(buf, 1, (size_t)len, f);
  fclose(f);
  buf[got] = 0;
  if (n) *n = got;
  return buf;
}

int nvrtcVersion(int *major, int *minor) {
  static int ma = 0, mi = 0;
  if (!ma) {
    FILE *p = popen("nvcc --version 2>/dev/null", "r");
    char line[512];
    while (p && fgets(line, sizeof line, p)) {
      char *r = strstr(line, "release ");
      if (r) sscanf(r + 8, "%d.%d", &ma, &mi);
    }
    if (p) pclose(p);
  }
  if (!ma) return 1;
  *major = ma;
  *minor = mi;
  return 0;
}

const char *nvrtcGetErrorString(int r) {
  return r == 0 ? "NVRTC_SUCCESS" : r == 6 ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR (nvcc shim)";
}

int nvrtcCreateProgram(Prog **p, const char *src, const char *name, int nh, const char *const *h,
                       const char *const *inc) {
  (void)name, (void)h, (void)inc;
  if (nh != 0) return 3;
  *p = calloc(1, sizeof(Prog));
  (*p)->src = strdup(src);
  return 0;
}

int nvrtcCompileProgram(Prog *p, int n, const char *const *opts) {
  char dir[] = "/tmp/nvrtc-nvcc-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char cu[64], out[64], log[64];
  snprintf(cu, sizeof cu, "%s/k.cu", dir);
  snprintf(out, sizeof out, "%s/k.cubin", dir);
  snprintf(log, sizeof log, "%s/log", dir);
  FILE *f = fopen(cu, "w");
  if (!f) return 1;
  fputs(p->src, f);
  fclose(f);
  size_t cap = 256;
  for (int i = 0; i < n; i++) cap += strlen(opts[i]) + 8;
  char *cmd = malloc(cap + 3 * sizeof dir);
  snprintf(cmd, cap, "nvcc -cubin -o '%s' '%s'", out, cu);
  for (int i = 0; i < n; i++) {
    if (strchr(opts[i], '\'')) return 3; /* never from nvrtc.ts; keeps the quoting below sound */
    const char *o = opts[i];
    strcat(cmd, " '");
    if (strncmp(o, "--gpu-architecture=", 19) == 0) strcat(cmd, "-arch="), o += 19;
    else if (strncmp(o, "--std=", 6) == 0) strcat(cmd, "-std="), o += 6;
    strcat(cmd, o);
    strcat(cmd, "'");
  }
  strcat(cmd, " >'");
  strcat(cmd, log);
  strcat(cmd, "' 2>&1");
  int rc = system(cmd);
  free(cmd);
  p->log = slurp(log, NULL);
  if (rc == 0) p->cubin = (unsigned char *)slurp(out, &p->n);
  unlink(cu), unlink(out), unlink(log), rmdir(dir);
  return rc == 0 && p->cubin ? 0 : 6;
}

int nvrtcGetCUBINSize(Prog *p, size_t *n) { *n = p->n; return 0; }
int nvrtcGetCUBIN(Prog *p, char *out) { memcpy(out, p->cubin, p->n); return 0; }
int nvrtcGetProgramLogSize(Prog *p, size_t *n) { *n = p->log ? strlen(p->log) + 1 : 1; return 0; }
int nvrtcGetProgramLog(Prog *p, char *out) { strcpy(out, p->log ? p->log : ""); return 0; }
int nvrtcDestroyProgram(Prog **p) {
  free((*p)->src), free((*p)->log), free((*p)->cubin), free(*p);
  *p = NULL;
  return 0;
}
