/**
 * The executor side of low-precision weight copies (plan/low_copies.ts, compiler/passes/low_weight_copies.ts): a
 * plan that keeps `low:<name>` beside a weight source has each write of the source also write the copy,
 * with the same values (the runtime rounds them to the copy's type on upload). So every way weights reach
 * the device (a fresh start, a checkpoint resumed, weights set between steps, run() with new feeds) leaves
 * the copy equal to cast(master) before the next step's GEMMs read it, and checkpoints need not hold it.
 */
import { keepsLowCopies, lowCopyName } from "../plan/low_copies.ts";
import type { Plan } from "../plan/plan.ts";
import type { StepExecutor } from "../runtime/backend.ts";

/**
 * `ex` itself where `plan` (the one it runs) keeps no copy; else a view of it whose write() also writes
 * the copy. A view (a Proxy) rather than a wrapper object, so the executor's own methods that write feeds
 * (run()) go through it too, and its type is unchanged.
 */
export function refreshingLowCopies<Ex extends StepExecutor>(
  ex: Ex,
  plan: Pick<Plan, "inputs" | "outputs">,
): Ex {
  if (!keepsLowCopies(plan)) return ex;
  const write = (name: string, data: ArrayLike<number>) => {
    ex.write(name, data);
    // Device executors also take buffer ids; an id names no source with a copy.
    const copy = typeof name === "string" ? lowCopyName(plan, name) : undefined;
    if (copy !== undefined) ex.write(copy, data);
  };
  return new Proxy(ex, {
    get: (target, prop, receiver) => (prop === "write" ? write : Reflect.get(target, prop, receiver)),
  });
}
