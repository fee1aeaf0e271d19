/**
 * Timing a compiled plan's step, shared by the benchmarks: steps are submitted back to back and waited for
 * once per round, so the fixed cost of a wait (milliseconds on lavapipe) does not swamp small cases.
 */
import type { WebGPUExecutor } from "../runtime/webgpu/executor.ts";

export const STEPS_PER_ROUND = 4;

/** One side of a fused-vs-unfused comparison: launches, estimated bytes moved and time per step. */
export interface Side {
  kernels: number;
  bytes: number;
  ms: number;
}

/** Milliseconds per step over one round of STEPS_PER_ROUND steps. */
export async function timeRound(executor: WebGPUExecutor): Promise<number> {
  const t0 = performance.now();
  for (let j = 0; j < STEPS_PER_ROUND; j++) await executor.step();
  await executor.finish();
  return (performance.now() - t0) / STEPS_PER_ROUND;
}

export const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
