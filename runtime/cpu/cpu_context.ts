/**
 * Opening the CPU backend: the C compiler (required; cc.ts), oneDNN or OpenBLAS (optional; blas.ts: without both
 * GEMMs run on the backend's own sgemm, sgemm.c, with one warning line per process). Kernels and GEMMs run on one
 * thread pool of `$BERTFUSE_CPU_THREADS` threads, else one per core (pool.ts, started by the first
 * executor).
 */
import { openGemmLibrary } from "./blas.ts";
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
  const libraries = (["onednn", "openblas"] as const).map(openGemmLibrary);
  const [onednn, blas] = libraries.map((b) => "path" in b ? b : undefined), found = onednn ?? blas;
  const missing = libraries.map((b) => "missing" in b ? b.missing : "").join("; ");
  if (!found && !warned) {
    warned = true;
    console.error(`warning: ${missing}; GEMMs run on bertfuse's own sgemm, slower`);
  }
  const description = `${cpuModel()} (${threads} threads; ${cc.version}${
    found ? `; ${found.config.split(" ").slice(0, 2).join(" ")}` : "; own sgemm, no oneDNN or OpenBLAS"
  })`;
  return {
    cc,
    threads,
    description,
    gemms: onednn ? "onednn" : blas ? "openblas" : "own",
    ...(blas ? { blas } : {}),
    ...(onednn ? { onednn } : {}),
  };
}
