/**
 * A step's per-launch timing, as every executor's `profile` reports it (WebGPU timestamps, CUDA events,
 * the CPU's wall clock), and its DEBUG=2 lines.
 */
import type { PlanKernel } from "../plan/plan.ts";
export interface LaunchTime {
  /** Index of the step in plan.steps. */
  readonly step: number;
  readonly kernel: number;
  readonly name: string;
  /** Median over the iterations, in nanoseconds. */
  readonly ns: number;
  /** Plan estimates: bytesRead + bytesWritten, and flops. */
  readonly bytes: number;
  readonly flops: number;
  readonly gbPerS: number;
  readonly gflopPerS: number;
}

export interface Profile {
  readonly method: "timestamp" | "wallclock";
  readonly device: string;
  readonly iterations: number;
  readonly launches: readonly LaunchTime[];
  /** Sum of the launch medians, in nanoseconds. */
  readonly kernelNs: number;
  /** Median wall-clock time of a whole step (submitted normally, awaited to completion), in ms. */
  readonly stepMs: number;
}

/** What a timed launch ran: its step, its kernel's index and the kernel (its plan estimates). */
export interface TimedLaunch {
  readonly step: number;
  readonly kernelIndex: number;
  readonly kernel: Pick<PlanKernel, "name" | "bytesRead" | "bytesWritten" | "flops">;
}

/** The Profile of `launches` from each one's samples (ns, one per iteration) and whole steps' times (ms). */
export function profileOf(
  head: Pick<Profile, "method" | "device" | "iterations">,
  launches: readonly TimedLaunch[],
  samples: readonly (readonly number[])[],
  stepMs: readonly number[],
): Profile {
  const times = launches.map(({ step, kernelIndex, kernel: k }, j): LaunchTime => {
    const ns = median(samples[j]), bytes = k.bytesRead + k.bytesWritten;
    const rate = (x: number) => (ns > 0 ? x / ns : 0);
    return {
      step,
      kernel: kernelIndex,
      name: k.name,
      ns,
      bytes,
      flops: k.flops,
      gbPerS: rate(bytes),
      gflopPerS: rate(k.flops),
    };
  });
  return { ...head, launches: times, kernelNs: times.reduce((a, t) => a + t.ns, 0), stepMs: median(stepMs) };
}

export const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0
    ? 0
    : s.length % 2
    ? s[(s.length - 1) / 2]
    : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** DEBUG=2 lines: one per launch (time, GB/s, GFLOP/s), then the totals. */
export function formatProfile(p: Profile): string[] {
  const width = Math.max(6, ...p.launches.map((l) => l.name.length));
  const us = (ns: number) => (ns / 1000).toFixed(1).padStart(10);
  const lines = p.launches.map((l) =>
    `${l.name.padEnd(width)} ${us(l.ns)} us ${l.gbPerS.toFixed(2).padStart(9)} GB/s ${
      l.gflopPerS.toFixed(2).padStart(9)
    } GFLOP/s`
  );
  lines.push(
    `${"total".padEnd(width)} ${us(p.kernelNs)} us in ${p.launches.length} launches; step ${
      p.stepMs.toFixed(3)
    } ms wall (${p.method}, median of ${p.iterations}, ${p.device})`,
  );
  return lines;
}
