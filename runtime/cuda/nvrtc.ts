/**
 * NVRTC (libnvrtc.so) through Deno FFI: CUDA C source to a CUBIN for the device's exact architecture.
 *
 * C signatures (NVRTC's documented API; nvrtc.h is not installed on the development machine): nvrtcResult
 * is a C enum (i32); nvrtcProgram is an opaque pointer; `nvrtcCreateProgram(nvrtcProgram* prog, const char*
 * src, const char* name, int numHeaders, const char* const* headers, const char* const* includeNames)`;
 * `nvrtcCompileProgram(nvrtcProgram, int numOptions, const char* const* options)`; the size getters write
 * a size_t; `nvrtcGetErrorString(nvrtcResult)` returns a const char*.
 */
import { cString, cStringArray } from "./driver.ts";
import { CudaError } from "./errors.ts";
import { discover, type DiscoverOptions, openDiscovered } from "./libs.ts";

export const NVRTC_SYMBOLS = {
  nvrtcVersion: { parameters: ["buffer", "buffer"], result: "i32" },
  nvrtcGetErrorString: { parameters: ["i32"], result: "pointer" },
  nvrtcCreateProgram: {
    parameters: ["buffer", "buffer", "buffer", "i32", "pointer", "pointer"],
    result: "i32",
  },
  nvrtcCompileProgram: { parameters: ["pointer", "i32", "buffer"], result: "i32" },
  nvrtcGetCUBINSize: { parameters: ["pointer", "buffer"], result: "i32" },
  nvrtcGetCUBIN: { parameters: ["pointer", "buffer"], result: "i32" },
  nvrtcGetProgramLogSize: { parameters: ["pointer", "buffer"], result: "i32" },
  nvrtcGetProgramLog: { parameters: ["pointer", "buffer"], result: "i32" },
  nvrtcDestroyProgram: { parameters: ["buffer"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

/** NVRTC_ERROR_COMPILATION: the source did not compile; the log says why. */
const NVRTC_ERROR_COMPILATION = 6;

export class Nvrtc {
  private constructor(
    private readonly lib: Deno.DynamicLibrary<typeof NVRTC_SYMBOLS>,
    readonly path: string,
    /** [major, minor], e.g. [13, 0]. */
    readonly version: readonly [number, number],
    /** Folders with the CUDA headers the kernels may include (cuda_fp16.h, cuda_bf16.h), as -I options. */
    readonly includeDirs: readonly string[],
  ) {}

  static open(opts: DiscoverOptions = {}): Nvrtc {
    const found = discover("nvrtc", opts);
    const { lib, path } = openDiscovered(found, NVRTC_SYMBOLS);
    const major = new Int32Array(1), minor = new Int32Array(1);
    const status = lib.symbols.nvrtcVersion(major, minor);
    if (status !== 0) {
      lib.close();
      throw new CudaError(`nvrtcVersion failed with status ${status} (${path})`);
    }
    return new Nvrtc(lib, path, [major[0], minor[0]], includeDirsNear(path, opts));
  }

  /** "13.0" */
  get versionString(): string {
    return `${this.version[0]}.${this.version[1]}`;
  }

  /** The options a compile for `arch` (e.g. "sm_90") uses; part of the cache key. */
  options(arch: string): string[] {
    return [
      `--gpu-architecture=${arch}`,
      "--std=c++17",
      // No fast-math: kernels must match the reference interpreter (exp, erf, division as specified).
      ...this.includeDirs.map((d) => `-I${d}`),
    ];
  }

  /**
   * Compiles `source` to a CUBIN for `arch`. A compile error throws a CudaError with the kernel name and
   * NVRTC's log.
   */
  compile(source: string, arch: string, kernel: string): Uint8Array<ArrayBuffer> {
    const s = this.lib.symbols;
    const progOut = new BigUint64Array(1);
    this.check(
      "nvrtcCreateProgram",
      s.nvrtcCreateProgram(progOut, cString(source), cString(`${kernel}.cu`), 0, null, null),
      kernel,
    );
    const prog = Deno.UnsafePointer.create(progOut[0]);
    try {
      const opts = cStringArray(this.options(arch));
      const status = s.nvrtcCompileProgram(prog, this.options(arch).length, opts.pointers);
      if (status !== 0) {
        const log = this.log(prog);
        const what = status === NVRTC_ERROR_COMPILATION
          ? "did not compile"
          : `failed (${this.statusName(status)})`;
        throw new CudaError(
          `kernel ${kernel}: CUDA source ${what} with NVRTC ${this.versionString} for ${arch}` +
            (log ? `:\n${log}` : ""),
        );
      }
      const size = new BigUint64Array(1);
      this.check("nvrtcGetCUBINSize", s.nvrtcGetCUBINSize(prog, size), kernel);
      const cubin = new Uint8Array(Number(size[0]));
      this.check("nvrtcGetCUBIN", s.nvrtcGetCUBIN(prog, cubin), kernel);
      return cubin;
    } finally {
      s.nvrtcDestroyProgram(progOut);
    }
  }

  close(): void {
    this.lib.close();
  }

  private log(prog: Deno.PointerValue): string {
    const s = this.lib.symbols;
    const size = new BigUint64Array(1);
    if (s.nvrtcGetProgramLogSize(prog, size) !== 0 || size[0] <= 1n) return "";
    const buf = new Uint8Array(Number(size[0]));
    if (s.nvrtcGetProgramLog(prog, buf) !== 0) return "";
    return new TextDecoder().decode(buf.subarray(0, Math.max(0, buf.indexOf(0)))).trim();
  }

  private statusName(status: number): string {
    const p = this.lib.symbols.nvrtcGetErrorString(status);
    return p ? `${Deno.UnsafePointerView.getCString(p)} (${status})` : `status ${status}`;
  }

  private check(call: string, status: number, kernel: string): void {
    if (status !== 0) {
      throw new CudaError(`${call} failed with ${this.statusName(status)} (kernel ${kernel})`);
    }
  }
}

/**
 * Header folders to pass with -I: the toolkit's include/ beside the NVRTC library (lib64/.. or a wheel's
 * nvidia/<pkg>/..), then $CUDA_HOME/include and /usr/local/cuda/include. Recent NVRTC versions carry
 * cuda_fp16.h and cuda_bf16.h built in; older ones need the folder.
 */
function includeDirsNear(libPath: string, opts: DiscoverOptions): string[] {
  const env = opts.env ?? ((n: string) => {
    try {
      return Deno.env.get(n);
    } catch {
      return undefined;
    }
  });
  const dir = libPath.includes("/") ? libPath.slice(0, libPath.lastIndexOf("/")) : "";
  const candidates = [
    ...(dir ? [`${dir}/../include`, `${dir}/../../include`] : []),
    ...["CUDA_HOME", "CUDA_PATH"].map((v) => env(v)).filter((v): v is string => !!v).map((r) =>
      `${r}/include`
    ),
    "/usr/local/cuda/include",
  ];
  const out: string[] = [];
  for (const c of candidates) {
    try {
      const real = Deno.realPathSync(c);
      if (Deno.statSync(`${real}/cuda_fp16.h`).isFile && !out.includes(real)) out.push(real);
    } catch {
      // not there
    }
  }
  return out.slice(0, 1);
}
