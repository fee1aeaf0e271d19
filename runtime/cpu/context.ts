/**
 * Opening the CPU backend: the C compiler (required; cc.ts) and OpenBLAS (optional; blas.ts: without it
 * GEMMs run as the template kernel, with one warning line per process).
 *
 * OpenMP's wait policy: with OpenBLAS's OpenMP build (one libgomp thread pool for GEMMs and kernels) or
 * no BLAS, libgomp's default: an idle thread spins a while (GOMP_SPINCOUNT) before it sleeps, so the next
 * kernel, microseconds later, finds it awake. Told to sleep at once (OMP_WAIT_POLICY=passive), each of a
 * step's ~120 kernels paid a futex wake-up of its second thread: the BERT-tiny training step took 72-86
 * ms against 44-47 ms (same machine, same minutes). Only OpenBLAS's pthread build, whose own pool would
 * compete with ours for the cores between kernels, gets the passive policy, set before libgomp is loaded
 * (by the first kernel library then). A policy the user set is kept.
 */
import { openBlas } from "./blas.ts";
import { findCompiler } from "./cc.ts";
import type { CpuContext } from "./executor.ts";

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

/** The CPU backend's context; throws CpuUnavailableError (one line) without a C compiler. */
export function openCpu(): CpuContext {
  const cc = findCompiler();
  const threads = navigator.hardwareConcurrency || 1;
  const blas = openBlas();
  const found = "lib" in blas ? blas : undefined;
  if (found && !/\bUSE_OPENMP\b/.test(found.config)) {
    try {
      if (Deno.env.get("OMP_WAIT_POLICY") === undefined) Deno.env.set("OMP_WAIT_POLICY", "passive");
    } catch {
      // no --allow-env: libgomp's default
    }
  }
  if (!found && !warned) {
    warned = true;
    console.error(`warning: ${(blas as { missing: string }).missing}; GEMMs run as the C template kernel`);
  }
  const description = `${cpuModel()} (${threads} threads; ${cc.version}${
    found ? `; ${found.config.split(" ").slice(0, 2).join(" ")}` : "; no BLAS"
  })`;
  return {
    cc,
    threads,
    description,
    ...(found ? { blas: found } : { blasMissing: (blas as { missing: string }).missing }),
  };
}
