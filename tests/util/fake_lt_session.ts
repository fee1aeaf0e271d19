/**
 * The fake libcuda, libnvrtc and libcublasLt (fake_cuda.ts) built into a temporary folder, and the driver
 * and cuBLASLt opened from it once per test file: what the fake-library tests share.
 */
import { CublasLt } from "../../runtime/cuda/cublaslt.ts";
import { CudaDriver } from "../../runtime/cuda/driver.ts";
import { buildFakeLibs, FAKE_DRIVER, FAKE_LT, FAKE_NVRTC } from "./fake_cuda.ts";

export interface FakeLtSession {
  /** The folder holding the fake libraries (and room for a kernel cache). */
  readonly dir: string;
  /** Why the fakes could not be built (no C compiler, no cuda.h), or undefined. */
  readonly why?: string;
  /** Library discovery that looks in `dir` only. */
  readonly discoverOpts: { env: (n: string) => string | undefined; systemDirs: string[] };
  /** The driver and cuBLASLt, opened on first use. */
  open(): { driver: CudaDriver; lt: CublasLt };
}

export async function fakeLtSession(prefix: string): Promise<FakeLtSession> {
  const dir = await Deno.makeTempDir({ prefix });
  const why = await buildFakeLibs(dir, {
    "libcuda.so.1": FAKE_DRIVER,
    "libnvrtc.so.13": FAKE_NVRTC,
    "libcublasLt.so.13": FAKE_LT,
  });
  const discoverOpts = { env: (n: string) => (n === "LD_LIBRARY_PATH" ? dir : undefined), systemDirs: [] };
  let opened: { driver: CudaDriver; lt: CublasLt } | undefined;
  return {
    dir,
    why,
    discoverOpts,
    open() {
      if (!opened) {
        const driver = CudaDriver.open(0, discoverOpts);
        opened = { driver, lt: CublasLt.open(driver, { ...discoverOpts, workspaceBytes: 1024 }) };
      }
      return opened;
    },
  };
}

/**
 * Fresh random multiples of 1/32 in [-1, 1): exact in f16, so every dtype sees the same numbers, and in f32
 * sums of a few terms.
 */
export function exactValues(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return Math.round(((s >>> 8) / 2 ** 24 - 0.5) * 64) / 32;
  });
}
