/**
 * NVRTC loaded from a Python wheel's folder (site-packages/nvidia/<pkg>/lib), which is on no loader path:
 * libnvrtc dlopens libnvrtc-builtins.so.X.Y by soname at the first compile, and that fails unless the
 * runtime loaded the builtins from the same folder first (runtime/cuda/nvrtc_files.ts).
 *
 * Two tests: a fake libnvrtc built here with gcc that does what the real one does (dlopen of its builtins
 * by soname inside nvrtcCompileProgram, NVRTC_ERROR_BUILTIN_OPERATION_FAILURE when that fails), and the
 * real NVRTC of this machine when one is found (discovery as the runtime does it, LD_LIBRARY_PATH
 * included), linked into a wheel-shaped temp folder and used by a child process whose loader path is
 * empty. Each is ignored, with the reason, without gcc or a real NVRTC with its builtins beside it.
 */
import assert from "node:assert/strict";
import { discover } from "../../runtime/cuda/libs.ts";
import { Nvrtc } from "../../runtime/cuda/nvrtc.ts";
import { builtinsBeside } from "../../runtime/cuda/nvrtc_files.ts";

const FAKE_NVRTC = String.raw`
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
typedef struct { int ok; } Prog;
int nvrtcVersion(int *major, int *minor) { *major = 13; *minor = 0; return 0; }
const char *nvrtcGetErrorString(int r) { return r == 7 ? "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE" : "NVRTC_ERROR"; }
int nvrtcCreateProgram(Prog **p, const char *src, const char *name, int nh, const char *const *h, const char *const *inc) {
  *p = calloc(1, sizeof(Prog)); return 0;
}
/* As the real one: the builtins by soname, found only if on the loader path or already loaded. */
int nvrtcCompileProgram(Prog *p, int n, const char *const *opts) {
  void *b = dlopen("libnvrtc-builtins.so.13.0", RTLD_NOW);
  if (!b) return 7;
  int (*probe)(void) = (int (*)(void))dlsym(b, "fake_builtins_probe");
  p->ok = probe && probe() == 42;
  return p->ok ? 0 : 7;
}
int nvrtcGetCUBINSize(Prog *p, size_t *n) { *n = 8; return 0; }
int nvrtcGetCUBIN(Prog *p, char *out) { memcpy(out, "FAKEBIN", 8); return 0; }
int nvrtcGetProgramLogSize(Prog *p, size_t *n) { *n = 1; return 0; }
int nvrtcGetProgramLog(Prog *p, char *out) { out[0] = 0; return 0; }
int nvrtcDestroyProgram(Prog **p) { free(*p); *p = 0; return 0; }
`;
const FAKE_BUILTINS = "int fake_builtins_probe(void) { return 42; }\n";

async function gcc(args: string[]): Promise<boolean | undefined> {
  try {
    const r = await new Deno.Command("gcc", { args, stdout: "piped", stderr: "piped" }).output();
    if (!r.success) throw new Error(`gcc failed: ${new TextDecoder().decode(r.stderr)}`);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    throw e;
  }
}

const hasGcc = await gcc(["--version"]).catch(() => undefined);
if (!hasGcc) console.log("fake wheel NVRTC test ignored: no gcc");

const KERNEL = `extern "C" __global__ void bf_kernel(float* b0) { b0[threadIdx.x] = 1.0f; }`;

Deno.test({
  name: "NVRTC from a wheel folder (fake): libnvrtc-builtins is loaded from the same folder before compiling",
  ignore: !hasGcc,
  async fn() {
    const root = await Deno.makeTempDir({ prefix: "bertfuse-wheel-" });
    try {
      const sp = `${root}/lib/python3.12/site-packages`;
      const lib = `${sp}/nvidia/cuda_nvrtc/lib`;
      Deno.mkdirSync(lib, { recursive: true });
      Deno.writeTextFileSync(`${root}/nvrtc.c`, FAKE_NVRTC);
      Deno.writeTextFileSync(`${root}/builtins.c`, FAKE_BUILTINS);
      await gcc(["-shared", "-fPIC", "-o", `${lib}/libnvrtc.so.13`, `${root}/nvrtc.c`, "-ldl"]);
      await gcc([
        "-shared",
        "-fPIC",
        "-Wl,-soname,libnvrtc-builtins.so.13.0",
        "-o",
        `${lib}/libnvrtc-builtins.so.13.0`,
        `${root}/builtins.c`,
      ]);
      // The failure this guards against: libnvrtc opened alone cannot find its builtins.
      const bare = Deno.dlopen(`${lib}/libnvrtc.so.13`, {
        nvrtcCreateProgram: {
          parameters: ["buffer", "pointer", "pointer", "i32", "pointer", "pointer"],
          result: "i32",
        },
        nvrtcCompileProgram: { parameters: ["pointer", "i32", "pointer"], result: "i32" },
      });
      const prog = new BigUint64Array(1);
      assert.equal(bare.symbols.nvrtcCreateProgram(prog, null, null, 0, null, null), 0);
      assert.equal(bare.symbols.nvrtcCompileProgram(Deno.UnsafePointer.create(prog[0]), 0, null), 7);
      const nvrtc = Nvrtc.open({ env: () => undefined, sitePackages: [sp], systemDirs: [lib] });
      try {
        assert.equal(nvrtc.path, `${lib}/libnvrtc.so.13`);
        assert.deepEqual([...nvrtc.compile(KERNEL, "sm_90", "k")], [
          ...new TextEncoder().encode("FAKEBIN\0"),
        ]);
      } finally {
        nvrtc.close();
        bare.close();
      }
    } finally {
      await Deno.remove(root, { recursive: true });
    }
  },
});

/** The real NVRTC here and its builtins, when discovery finds one with builtins beside it. */
function realNvrtc(): { lib: string; builtins: string[] } | string {
  const d = discover("nvrtc");
  if (!d.path) return "no libnvrtc on this machine (LD_LIBRARY_PATH, CUDA toolkits, Python wheels, system)";
  const builtins = builtinsBeside(d.path, [0, 0]);
  if (builtins.length === 0) return `${d.path} has no libnvrtc-builtins beside it`;
  return { lib: d.path, builtins };
}

const real = realNvrtc();
if (typeof real === "string") console.log(`real wheel NVRTC test ignored: ${real}`);

Deno.test({
  name: `NVRTC from a wheel folder (real library)${typeof real === "string" ? ` (${real})` : ""}`,
  ignore: typeof real === "string",
  async fn() {
    const r = real as { lib: string; builtins: string[] };
    const root = await Deno.makeTempDir({ prefix: "bertfuse-wheel-real-" });
    try {
      const sp = `${root}/lib/python3.12/site-packages`;
      const lib = `${sp}/nvidia/cuda_nvrtc/lib`;
      Deno.mkdirSync(lib, { recursive: true });
      for (const f of [r.lib, ...r.builtins]) {
        Deno.symlinkSync(f, `${lib}/${f.slice(f.lastIndexOf("/") + 1)}`);
      }
      // A child process: this one may have loaded the builtins already, and its loader path may find them.
      const script = `${root}/compile.ts`;
      const nvrtcUrl = new URL("../../runtime/cuda/nvrtc.ts", import.meta.url).href;
      Deno.writeTextFileSync(
        script,
        `import { Nvrtc } from ${JSON.stringify(nvrtcUrl)};
const n = Nvrtc.open({ env: () => undefined, sitePackages: [${JSON.stringify(sp)}], systemDirs: [${
          JSON.stringify(lib)
        }] });
const cubin = n.compile(${JSON.stringify(KERNEL)}, "sm_90", "wheel_test");
console.log(JSON.stringify({ path: n.path, version: n.versionString, bytes: cubin.length }));`,
      );
      const env = { ...Deno.env.toObject() };
      delete env.LD_LIBRARY_PATH;
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "--no-check", script],
        env,
        clearEnv: true,
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
      assert.ok(out.success, text);
      const got = JSON.parse(text.trim().split("\n").pop()!);
      assert.equal(got.path, `${lib}/${r.lib.slice(r.lib.lastIndexOf("/") + 1)}`);
      assert.ok(got.bytes > 100, `a CUBIN from NVRTC ${got.version}: ${got.bytes} bytes`);
      console.log(`real NVRTC ${got.version} from a wheel folder compiled a kernel: ${got.bytes}-byte CUBIN`);
    } finally {
      await Deno.remove(root, { recursive: true });
    }
  },
});
