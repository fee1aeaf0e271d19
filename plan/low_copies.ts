/**
 * The names, shared by compiler and runtimes, of low-precision weight copies kept as state between steps
 * (compiler/passes/low_weight_copies.ts): a training plan for cuBLASLt reads its GEMM weights from an
 * f16/bf16 copy that the optimizer's last pass rewrites each step, named `low:<name>` beside its f32 source
 * `<name>` (a parameter, or `flat.params`, the flat vector holding them). The source stays the truth: whoever
 * writes one (a fresh start, a checkpoint, weights set between steps) writes its copy from the same values,
 * rounded on upload to nearest even as the cast kernel did (engine/low_copy_refresh.ts, for every executor).
 */
import type { Plan } from "./plan.ts";

export const LOW_COPY_PREFIX = "low:";

/** The name of `name`'s low-precision copy where the plan keeps one (an input or a flat output). */
export function lowCopyName(plan: Pick<Plan, "inputs" | "outputs">, name: string): string | undefined {
  if (name.startsWith(LOW_COPY_PREFIX)) return undefined;
  const copy = LOW_COPY_PREFIX + name;
  return plan.inputs[copy] !== undefined || plan.outputs[copy] !== undefined ? copy : undefined;
}

/** Whether the plan keeps any low-precision copy. */
export function keepsLowCopies(plan: Pick<Plan, "inputs">): boolean {
  return Object.keys(plan.inputs).some((n) => n.startsWith(LOW_COPY_PREFIX));
}

/**
 * `feeds` with each fed source's copy fed the same values, unless the feeds give the copy themselves: for
 * callers that hand a plan all its inputs at once (tests, the CUDA shim).
 */
export function withLowCopyFeeds<T>(
  plan: Pick<Plan, "inputs" | "outputs">,
  feeds: Record<string, T>,
): Record<string, T> {
  const out = { ...feeds };
  for (const [name, data] of Object.entries(feeds)) {
    const copy = lowCopyName(plan, name);
    if (copy !== undefined && !(copy in feeds)) out[copy] = data;
  }
  return out;
}
