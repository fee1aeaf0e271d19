/** Errors of the CPU backend: one line naming what failed (the C compiler, a kernel, a buffer). */
export class CpuError extends Error {
  override name = "CpuError";
}

/** The backend cannot run here at all (no C compiler, no permission to run it). */
export class CpuUnavailableError extends CpuError {
  override name = "CpuUnavailableError";
}
