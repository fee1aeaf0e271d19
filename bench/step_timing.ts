/**
 * Timing a compiled plan's step, shared by the benchmarks: steps are submitted back to back and waited for
 * once per round, so the fixed cost of a wait (milliseconds on lavapipe) does not swamp small cases.
 */

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
