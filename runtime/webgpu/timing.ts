/**
 * Per-launch timing of a plan's step program, for benchmarks and DEBUG=2. With timestamp-query each launch
 * runs in a compute pass of its own whose begin/end timestamps bracket it; without it, each launch is
 * submitted alone and timed on the wall clock until onSubmittedWorkDone (which includes submission
 * overhead, so those times are upper bounds).
 */
import type { Plan } from "../../plan/plan.ts";
import type { GpuContext } from "./device.ts";
import type { Encoded } from "./webgpu_executor.ts";
import { encodeProgram } from "./webgpu_executor.ts";
import { WebGPUError } from "./webgpu_errors.ts";
import { type Profile, profileOf } from "../profile.ts";

/** WebGPU caps a query set at 4096 queries: two per launch. */
const LAUNCHES_PER_QUERY_SET = 2048;

export async function profileSteps(
  ctx: GpuContext,
  plan: Plan,
  program: readonly Encoded[],
  iterations: number,
  step: () => Promise<void>,
): Promise<Profile> {
  if (!Number.isInteger(iterations) || iterations < 1) {
    throw new WebGPUError(`profile needs a positive whole number of iterations, got ${iterations}`);
  }
  const { device } = ctx;
  // Warm-up: drivers such as lavapipe compile shaders on first dispatch.
  await step();
  await device.queue.onSubmittedWorkDone();
  const stepMs: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const t0 = performance.now();
    await step();
    await device.queue.onSubmittedWorkDone();
    stepMs.push(performance.now() - t0);
  }

  const launches = program.filter((s) => s.op === "launch");
  const samples: number[][] = launches.map(() => []);
  for (let it = 0; it < iterations; it++) {
    const ns = ctx.hasTimestamps
      ? await timestampRun(device, program, launches.length)
      : await wallclockRun(device, program);
    ns.forEach((v, j) => samples[j].push(v));
  }
  const timed = launches.map((s) => {
    const k = (s as Extract<Encoded, { op: "launch" }>).launch.kernel;
    return { step: s.index, kernelIndex: plan.kernels.indexOf(k), kernel: k };
  });
  const method = ctx.hasTimestamps ? "timestamp" as const : "wallclock" as const;
  return profileOf({ method, device: ctx.description, iterations }, timed, samples, stepMs);
}

/** One step with every launch in its own timestamped pass; returns each launch's duration in ns. */
async function timestampRun(
  device: GPUDevice,
  program: readonly Encoded[],
  launchCount: number,
): Promise<number[]> {
  const sets: GPUQuerySet[] = [];
  for (let i = 0; i < launchCount; i += LAUNCHES_PER_QUERY_SET) {
    const count = 2 * Math.min(LAUNCHES_PER_QUERY_SET, launchCount - i);
    sets.push(device.createQuerySet({ type: "timestamp", count }));
  }
  const resolve = device.createBuffer({
    size: Math.max(8, 16 * launchCount),
    usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
  });
  const staging = device.createBuffer({
    size: Math.max(8, 16 * launchCount),
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
  });
  try {
    const enc = device.createCommandEncoder({ label: "profile" });
    let j = 0;
    for (const s of program) {
      if (s.op !== "launch") {
        encodeProgram(enc, [s]);
        continue;
      }
      const set = sets[Math.floor(j / LAUNCHES_PER_QUERY_SET)];
      const q = 2 * (j % LAUNCHES_PER_QUERY_SET);
      const pass = enc.beginComputePass({
        label: s.launch.kernel.name,
        timestampWrites: { querySet: set, beginningOfPassWriteIndex: q, endOfPassWriteIndex: q + 1 },
      });
      pass.setPipeline(s.launch.pipeline);
      pass.setBindGroup(0, s.launch.bindGroup);
      pass.dispatchWorkgroups(s.launch.grid[0], s.launch.grid[1], s.launch.grid[2]);
      pass.end();
      j++;
    }
    sets.forEach((set, i) =>
      enc.resolveQuerySet(set, 0, set.count, resolve, i * LAUNCHES_PER_QUERY_SET * 16)
    );
    enc.copyBufferToBuffer(resolve, 0, staging, 0, staging.size);
    device.queue.submit([enc.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const t = new BigUint64Array(staging.getMappedRange().slice(0));
    staging.unmap();
    const out: number[] = [];
    for (let i = 0; i < launchCount; i++) {
      const d = t[2 * i + 1] - t[2 * i];
      // A timestamp pair can come back reversed or reset on some drivers; count those as 0, not 2^64.
      out.push(d > 0n ? Number(d) : 0);
    }
    return out;
  } finally {
    for (const s of sets) s.destroy();
    resolve.destroy();
    staging.destroy();
  }
}

/** One step with every launch submitted alone and awaited; returns each launch's wall time in ns. */
async function wallclockRun(
  device: GPUDevice,
  program: readonly Encoded[],
): Promise<number[]> {
  const out: number[] = [];
  for (const s of program) {
    const enc = device.createCommandEncoder();
    encodeProgram(enc, [s]);
    const t0 = performance.now();
    device.queue.submit([enc.finish()]);
    await device.queue.onSubmittedWorkDone();
    if (s.op === "launch") out.push((performance.now() - t0) * 1e6);
  }
  return out;
}
