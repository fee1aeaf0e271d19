/**
 * Plans with bias-gradient epilogues (compiler/lower/gemm_bgrad.ts) rewritten into what the CUDA runtime
 * runs on each of its paths, for the CPU shim (tests/util/cuda_cpu.ts runs every step it is given): the
 * epilogue path, where the column-sum kernels named as the fallback are left out of the step, and the
 * fallback path, where the call runs without the epilogue and the kernels run. And a planted mistake: the
 * epilogue on the other operand (the other one of BGRADA / BGRADB once mapped).
 */
import type { Plan, PlanGemm, PlanKernel, PlanStep } from "../../plan/plan.ts";

type Bgrad = Extract<NonNullable<PlanGemm["epilogue"]>, { kind: "bgrad" }>;

/** The bias-gradient epilogues of a plan's library calls, with their kernels. */
export function bgradCalls(plan: Plan): { kernel: PlanKernel; epilogue: Bgrad }[] {
  return plan.kernels.flatMap((kernel) => {
    const e = kernel.library?.call.epilogue;
    return e?.kind === "bgrad" ? [{ kernel, epilogue: e }] : [];
  });
}

/**
 * The steps as the CUDA runtime runs them when every call takes its epilogue: no fallback launches, and
 * the vector copied into its other buffers right after the call (runtime/cuda/cuda_executor.ts).
 */
export function epiloguePath(plan: Plan): Plan {
  const covered = new Set(bgradCalls(plan).flatMap((c) => c.epilogue.fallback));
  return {
    ...plan,
    steps: plan.steps.flatMap((s): PlanStep[] => {
      if (s.op !== "launch") return [s];
      const k = plan.kernels[s.kernel];
      if (covered.has(k.name)) return [];
      const e = k.library?.call.epilogue;
      if (e?.kind !== "bgrad") return [s];
      const bytes = plan.buffers[e.bias.buffer].bytes;
      return [s, ...e.copies.map((dst): PlanStep => ({ op: "copy", src: e.bias.buffer, dst, bytes }))];
    }),
  };
}

/** Every library call with a bias-gradient epilogue edited by `edit` (undefined: without it). */
function editCalls(plan: Plan, edit: (e: Bgrad) => Bgrad | undefined): Plan {
  return {
    ...plan,
    kernels: plan.kernels.map((k) => {
      const g = k.library, e = g?.call.epilogue;
      if (!g || e?.kind !== "bgrad") return k;
      const { epilogue: _, ...call } = g.call;
      const next = edit(e);
      return { ...k, library: { ...g, call: next ? { ...call, epilogue: next } : call } };
    }),
  };
}

/** The fallback path: each call without its epilogue, the column-sum kernels launched. */
export const fallbackPath = (plan: Plan): Plan => editCalls(plan, () => undefined);

/** Planted: each epilogue on the other operand (BGRADA where BGRADB belongs and back), kernels left out. */
export const otherOperand = (plan: Plan): Plan =>
  epiloguePath(editCalls(plan, (e) => ({ ...e, operand: e.operand === "a" ? "b" : "a" })));
