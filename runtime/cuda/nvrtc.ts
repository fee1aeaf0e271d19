/**
 * NVRTC (libnvrtc.so) through Deno FFI: CUDA C source to a CUBIN for the device's exact architecture. C
 * signatures (NVRTC's documented API; nvrtc.h is not installed on the development machine): nvrtcResult is a
 * C enum (i32); nvrtcProgram is an opaque pointer; `nvrtcCreateProgram(nvrtcProgram* prog, const char* src,
 * const char* name, int numHeaders, const char* const* headers, const char* const* includeNames)`;
 * `nvrtcCompileProgram(nvrtcProgram, int numOptions, const char* const* options)`; the size getters write a
 * size_t; `nvrtcGetErrorString(nvrtcResult)` returns a const char*.
 */
import { cString, cStringArray } from "./driver.ts";
import { CudaError } from "./cuda_errors.ts";
import { discover, type DiscoverOptions, openDiscovered } from "./libs.ts";
import { includeDirsFor, keyOptions, preloadBuiltins } from "./nvrtc_files.ts";

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
  private readonly keyed = new Map<string, string[]>();

  private constructor(
    private readonly lib: Deno.DynamicLibrary<typeof NVRTC_SYMBOLS>,
    /** libnvrtc-builtins loaded from libnvrtc's folder (nvrtc_files.ts), closed with NVRTC. */
    private readonly builtins: Deno.DynamicLibrary<Record<string, never>> | null,
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
    const version = [major[0], minor[0]] as const;
    // Before any compile: libnvrtc dlopens its builtins by soname then (see nvrtc_files.ts).
    const builtins = preloadBuiltins(path, version);
    const env = opts.env ?? safeEnv;
    return new Nvrtc(lib, builtins, path, version, includeDirsFor(path, version, { env }));
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
   * The options as the kernel cache key sees them: include folders by their headers' contents, not their
   * paths, so the same headers elsewhere (another machine, a wheel instead of the toolkit) hit the cache.
   */
  keyOptions(arch: string): string[] {
    let k = this.keyed.get(arch);
    if (!k) {
      k = keyOptions(this.options(arch));
      this.keyed.set(arch, k);
    }
    return k;
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
    this.builtins?.close();
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

function safeEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined; // no --allow-env: the fixed folders are still searched
  }
}
