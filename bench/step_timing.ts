/**
 * Timing a compiled plan's step, shared by the benchmarks: steps are submitted back to back and waited for
 * once per round, so the fixed cost of a wait (milliseconds on lavapipe) does not swamp small cases.
 */
import type { Plan } from "../plan/plan.ts";
import type { Profile } from "../runtime/profile.ts";
import { OPTIMIZER_LOC } from "../optimizer/update.ts";

export const STEPS_PER_ROUND = 4;

/** One side of a fused-vs-unfused comparison: launches, estimated bytes moved and time per step. */
export interface Side {
  kernels: number;
  bytes: number;
  ms: number;
}

/** What a round needs of an executor (WebGPU and CUDA alike): submit a step; wait for all of them. */
export interface Steppable {
  step(): Promise<void>;
  finish(): Promise<void>;
}

/** Milliseconds per step over one round of `steps` steps submitted back to back. */
export async function timeRound(executor: Steppable, steps = STEPS_PER_ROUND): Promise<number> {
  const t0 = performance.now();
  for (let j = 0; j < steps; j++) await executor.step();
  await executor.finish();
  return (performance.now() - t0) / steps;
}

export const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/**
 * The 1-, 5- and 15-minute load averages (/proc/loadavg, read through Deno.loadavg: Deno refuses /proc to
 * --allow-read alone), or null without --allow-sys=loadavg.
 */
export function loadAverage(): number[] | null {
  try {
    return Deno.loadavg().map((x) => Math.round(x * 100) / 100);
  } catch {
    return null;
  }
}

/** A profiled step's time in parts, ms (bench:bert's JSON fields). */
export interface Shares {
  /** Matmul kernels and library GEMM calls (with their epilogue kernels). */
  gemm_ms: number;
  /** The optimizer update's kernels. */
  optimizer_ms: number;
  /** Every other kernel. */
  other_ms: number;
  /** The step's time outside kernel launches: the plan's copies (training: the updated parameters and
   * optimizer state copied back) and dispatch. */
  copy_ms: number;
}

/**
 * A profile's launches split into GEMMs, the optimizer and the rest. A kernel is the optimizer's when at
 * least half of its ops that have a location (PlanKernel.about: `%id op type (file:line)`) are the
 * optimizer's; a fused kernel mixing model and optimizer ops goes where most of its ops come from.
 */
export function stepShares(plan: Plan, p: Profile): Shares {
  const s = { gemm_ms: 0, optimizer_ms: 0, other_ms: 0, copy_ms: 0 };
  for (const l of p.launches) {
    const k = plan.kernels[l.kernel];
    const located = k.about.filter((a) => /^%\d+ .*\([^()]+\)/.test(a));
    const optimizer = located.filter((a) => a.includes(`(${OPTIMIZER_LOC})`)).length;
    const part = k.kind === "matmul" || k.library
      ? "gemm_ms"
      : optimizer > 0 && 2 * optimizer >= located.length
      ? "optimizer_ms"
      : "other_ms";
    s[part] += l.ns / 1e6;
  }
  s.copy_ms = Math.max(0, p.stepMs - p.kernelNs / 1e6);
  return s;
}
