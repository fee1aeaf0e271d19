/** Errors of the CPU backend: one line naming what failed (the C compiler, a kernel, a buffer). */
export class CpuError extends Error {
  override name = "CpuError";
}

/** The backend cannot run here at all (no C compiler, no permission to run it). */
export class CpuUnavailableError extends CpuError {
  override name = "CpuUnavailableError";
}

/** The kernel cache may not be used (a folder or file another user may write): the user's to fix. */
export class CpuCacheError extends CpuError {
  override name = "CpuCacheError";
}
