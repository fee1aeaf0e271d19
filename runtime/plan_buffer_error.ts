/** Errors every runtime shares: values that do not fit a plan's buffer, a plan whose layout is inconsistent. */
export class PlanBufferError extends Error {
  override name = "PlanBufferError";
}
