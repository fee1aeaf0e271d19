/**
 * Opening the CPU backend: the C compiler (required; cc.ts) and OpenBLAS (optional; blas.ts: without it
 * GEMMs run on the backend's own sgemm, sgemm.c, with one warning line per process). Kernels and GEMMs run on one
 * thread pool of `$BERTFUSE_CPU_THREADS` threads, else one per core (pool.ts, started by the first
 * executor).
 */
import { openBlas } from "./blas.ts";
import { env } from "../code_cache.ts";
import { checkBuildDir, findCompiler } from "./cc.ts";
import type { CpuContext } from "./cpu_executor.ts";

let warned = false;

/** The processor's model name, else the architecture (Deno may refuse /proc without --allow-all). */
function cpuModel(): string {
  try {
    const info = Deno.readTextFileSync("/proc/cpuinfo");
    return info.match(/^model name\s*:\s*(.+)$/m)?.[1].trim() ?? Deno.build.arch;
  } catch {
    return Deno.build.arch;
  }
}

/**
 * The CPU backend's context; throws CpuUnavailableError (one line) without a C compiler or a folder it
 * may build kernels in.
 */
export function openCpu(): CpuContext {
  const cc = findCompiler();
  checkBuildDir();
  const threads = Number(env("BERTFUSE_CPU_THREADS")) || navigator.hardwareConcurrency || 1;
  const blas = openBlas();
  const found = "lib" in blas ? blas : undefined;
  if (!found && !warned) {
    warned = true;
    console.error(
      `warning: ${(blas as { missing: string }).missing}; GEMMs run on bertfuse's own sgemm, slower`,
    );
  }
  const description = `${cpuModel()} (${threads} threads; ${cc.version}${
    found ? `; ${found.config.split(" ").slice(0, 2).join(" ")}` : "; own sgemm, no OpenBLAS"
  })`;
  return {
    cc,
    threads,
    description,
    gemms: found ? "openblas" : "own",
    ...(found ? { blas: found } : { blasMissing: (blas as { missing: string }).missing }),
  };
}
