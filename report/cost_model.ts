/**
 * The cost model of the fusion report: each kernel's predicted time on a device (its rates: compiler/targets/h100.ts)
 * (compiler/targets/), from the plan alone. A kernel costs its launch plus the larger of its arithmetic
 * time and its memory time (a roofline):
 * - a GEMM that runs as a cuBLASLt call (`library`): 2·M·N·K·batch FLOPs at the tensor-core rate (FP32
 *   operands: the CUDA-core rate, since compute type 32F excludes TF32), its operands' bytes (D in its own
 *   dtype, a BIAS epilogue's vector read, a bias-gradient epilogue's vector written); then, if it has one,
 *   the epilogue kernel: the scratch product (f32 or f16/bf16) read back plus the kernel's other traffic, a
 *   second launch. The column-sum kernels a bias-gradient epilogue names as its fallback are not counted:
 *   they run only where the call cannot take the epilogue; its copies of the vector are (a launch and the
 *   vector read and written each; none in a training step, whose gradient outputs are views of the flat
 *   gradient vector: compiler/stages/output_views.ts);
 * - a flash-attention kernel (kind "flash-attention"): its tensor-core FLOPs at the tensor-core rate, its
 *   operands' bytes (compiler/codegen/cuda_flash.ts flashCosts);
 * - every other kernel (the template GEMM included: it has no mma instruction): the plan's FLOP count at the
 *   CUDA-core rate times the template fraction, and its bytes read and written (kernel_cost.ts);
 * - a kernel (or epilogue) launching fewer threads than the device's `saturatingThreads` gets the rates
 *   scaled by its share (a serial loop per row or per column cannot keep HBM busy);
 * - a copy step or a parameter update: its bytes read and written, one launch.
 * Measured per-kernel times (a `DEBUG=2` profile's JSON) can be set beside the prediction.
 */
import type { Plan, PlanGemm, PlanGemmOperand, PlanKernel, TargetKernel } from "../plan/plan.ts";
import type { DeviceRates } from "../compiler/targets/h100.ts";

export type Route =
  | "cuBLASLt"
  | "cuBLASLt+epilogue"
  | "template GEMM"
  | "flash attention"
  | "kernel"
  | "copy";

export interface KernelPrediction {
  readonly name: string;
  readonly route: Route;
  readonly launches: number;
  /** Per step (all launches). */
  readonly flops: number;
  readonly bytes: number;
  readonly seconds: number;
  /** What the larger term was: arithmetic, memory or (for tiny kernels) the launch itself. */
  readonly bound: "compute" | "memory" | "launch";
}

export interface PlanPrediction {
  readonly device: DeviceRates;
  /** Plan kernels in plan order, then one row for copies and one for parameter updates (if any). */
  readonly rows: readonly KernelPrediction[];
  readonly seconds: number;
}

const operandBytes = (o: PlanGemmOperand, rows: number, cols: number, batch: number) =>
  rows * cols * (o.batchStride === 0 ? 1 : batch) * (o.dtype === "f32" ? 4 : 2);

/**
 * Bytes the library call itself moves: op(A), op(B) (a broadcast operand once), D and C if it reads one
 * (laid out and typed as D, compiler/fusion/sums_into_gemms.ts), plus a BIAS
 * epilogue's vector (read once per call; cuBLASLt adds it in the call's own epilogue, no extra pass), or a
 * bias gradient's (written once: the sums are taken from the operand tiles the GEMM loads anyway).
 */
function gemmCallBytes(g: PlanGemm): { a: number; b: number; d: number } {
  const e = g.epilogue;
  const length = e?.kind === "bgrad" && e.operand === "a" ? g.m : g.n;
  const bias = e ? length * (e.bias.dtype === "f32" ? 4 : 2) : 0;
  return {
    a: operandBytes(g.a, g.m, g.k, g.batch),
    b: operandBytes(g.b, g.k, g.n, g.batch),
    d: operandBytes(g.d, g.m, g.n, g.batch) + (g.c ? operandBytes(g.c, g.m, g.n, g.batch) : 0) + bias,
  };
}

/** The share of the device's rates a kernel launching `t`'s threads gets (1 when unknown). */
function occupancy(p: DeviceRates, t: TargetKernel | undefined): number {
  if (!t) return 1;
  return Math.min(1, (t.grid[0] * t.grid[1] * t.grid[2] * t.workgroupSize) / p.saturatingThreads);
}

function roofline(p: DeviceRates, flops: number, rate: number, bytes: number, share = 1) {
  const compute = flops / (rate * share), memory = bytes / (p.bandwidth * share);
  const bound = Math.max(compute, memory) < p.launch ? "launch" : compute >= memory ? "compute" : "memory";
  return { seconds: Math.max(compute, memory) + p.launch, bound } as const;
}

/** One launch of a plan kernel on the device. */
export function predictKernel(k: PlanKernel, p: DeviceRates): Omit<KernelPrediction, "name" | "launches"> {
  const g = k.library?.call;
  if (g) {
    const flops = 2 * g.m * g.n * g.k * g.batch;
    const io = gemmCallBytes(g);
    const rate = (g.a.dtype === "f32" ? p.fp32Peak : p.tensorPeak) * p.tensorFraction;
    const roof = roofline(p, flops, rate, io.a + io.b + io.d);
    // A bias gradient copied into the other buffers holding it: a device-to-device copy each.
    const e = g.epilogue;
    const vector = e?.kind === "bgrad"
      ? (e.operand === "a" ? g.m : g.n) * (e.bias.dtype === "f32" ? 4 : 2)
      : 0;
    const copies = e?.kind === "bgrad" ? e.copies.length : 0;
    const call = { ...roof, seconds: roof.seconds + copies * (p.launch + (2 * vector) / p.bandwidth) };
    const callBytes = io.a + io.b + io.d + 2 * vector * copies;
    if (!k.library!.epilogue) return { route: "cuBLASLt", flops, bytes: callBytes, ...call };
    // The epilogue reads the scratch product (io.d, in its dtype) and whatever else the fused kernel
    // read besides A and B.
    const epBytes = io.d + k.bytesWritten + Math.max(0, k.bytesRead - io.a - io.b);
    const ep = roofline(p, 0, 1, epBytes, occupancy(p, k.library!.epilogue.source));
    return {
      route: "cuBLASLt+epilogue",
      flops,
      bytes: callBytes + epBytes,
      seconds: call.seconds + ep.seconds,
      bound: call.bound,
    };
  }
  if (k.kind === "flash-attention") {
    // Its mma.sync FLOPs at the tensor-core rate (flash_attention.ts flashCosts: exp and Philox on CUDA
    // cores are not counted), its operands' bytes once.
    const bytes = k.bytesRead + k.bytesWritten;
    const rate = p.tensorPeak * p.tensorFraction;
    return {
      route: "flash attention",
      flops: k.flops,
      bytes,
      ...roofline(p, k.flops, rate, bytes, occupancy(p, k.source)),
    };
  }
  const route = k.kind === "matmul" ? "template GEMM" : "kernel";
  const bytes = k.bytesRead + k.bytesWritten;
  const share = occupancy(p, k.source);
  return {
    route,
    flops: k.flops,
    bytes,
    ...roofline(p, k.flops, p.fp32Peak * p.templateFraction, bytes, share),
  };
}

/** Every launch, copy and parameter update of one step of `plan` on `p`'s device. */
export function predictPlan(plan: Plan, p: DeviceRates): PlanPrediction {
  const launches = new Map<number, number>();
  let copyBytes = 0, copies = 0;
  for (const s of plan.steps) {
    if (s.op === "launch") launches.set(s.kernel, (launches.get(s.kernel) ?? 0) + 1);
    else (copies++, copyBytes += 2 * s.bytes);
  }
  const rows: KernelPrediction[] = [];
  const covered = bgradCovered(plan);
  plan.kernels.forEach((k, i) => {
    const n = launches.get(i) ?? 0;
    if (n === 0 || covered.has(k.name)) return;
    const one = predictKernel(k, p);
    rows.push({
      ...one,
      name: k.name,
      launches: n,
      flops: n * one.flops,
      bytes: n * one.bytes,
      seconds: n * one.seconds,
    });
  });
  const copyRow = (name: string, count: number, bytes: number): KernelPrediction => ({
    name,
    route: "copy",
    launches: count,
    flops: 0,
    bytes,
    seconds: bytes / p.bandwidth + count * p.launch,
    bound: bytes / p.bandwidth > count * p.launch ? "memory" : "launch",
  });
  if (copies) rows.push(copyRow("(copy steps)", copies, copyBytes));
  if (plan.updates.length) {
    const bytes = plan.updates.reduce((a, u) => a + 2 * plan.buffers[u.param].bytes, 0);
    rows.push(copyRow("(parameter updates)", plan.updates.length, bytes));
  }
  return { device: p, rows, seconds: rows.reduce((a, r) => a + r.seconds, 0) };
}

/**
 * Names of the kernels that bias-gradient epilogues of launched library calls stand in for (their
 * fallback, plan/plan.ts PlanGemmEpilogue): the CUDA runtime leaves them out of the step.
 */
export function bgradCovered(plan: Plan): Set<string> {
  const out = new Set<string>();
  for (const s of plan.steps) {
    if (s.op !== "launch") continue;
    const e = plan.kernels[s.kernel].library?.call.epilogue;
    if (e?.kind === "bgrad") { for (const n of e.fallback) out.add(n); }
  }
  return out;
}

/**
 * FLOPs per step of the plan's GEMM kernels (kind "matmul", each launch counted), and of those that run as
 * library calls on CUDA (a `library` call): a library GEMM counts its call's exact 2·M·N·K·batch; a template GEMM
 * the plan's count of its kernel (kernel_cost.ts), which includes the epilogue and the padding of partial
 * tiles, so the library share reported is, if anything, low.
 */
export function gemmFlops(plan: Plan): { gemm_flops: number; gemm_flops_library: number } {
  let all = 0, lib = 0;
  for (const s of plan.steps) {
    if (s.op !== "launch" || plan.kernels[s.kernel].kind !== "matmul") continue;
    const k = plan.kernels[s.kernel], g = k.library?.call;
    const f = g ? 2 * g.m * g.n * g.k * g.batch : k.flops;
    all += f;
    if (g) lib += f;
  }
  return { gemm_flops: all, gemm_flops_library: lib };
}

/** Measured per-kernel times, ms per step by kernel name, and the measured step if the file gives one. */
export interface Measured {
  readonly kernels: ReadonlyMap<string, number>;
  readonly stepMs?: number;
  readonly device?: string;
}

/**
 * Reads a timings file: `{"kernels": {name: ms}, "step_ms"?, "device"?}` (bench/gpu_train.ts --timings writes it
 * from a DEBUG=2 profile) or a flat `{name: ms}`. Throws a one-line Error on anything else.
 */
export function parseTimings(text: string, what: string): Measured {
  let j: unknown;
  try {
    j = JSON.parse(text);
  } catch (e) {
    throw new Error(`${what}: not JSON (${(e as Error).message})`);
  }
  const isObj = (x: unknown): x is Record<string, unknown> =>
    typeof x === "object" && x !== null && !Array.isArray(x);
  if (!isObj(j)) throw new Error(`${what}: expected a JSON object of kernel name -> ms`);
  const table = "kernels" in j ? j.kernels : j;
  if (!isObj(table)) throw new Error(`${what}: "kernels" must be an object of kernel name -> ms`);
  const kernels = new Map<string, number>();
  for (const [name, ms] of Object.entries(table)) {
    if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
      throw new Error(
        `${what}: kernel ${name}: expected a time in ms (a number >= 0), got ${JSON.stringify(ms)}`,
      );
    }
    kernels.set(name, ms);
  }
  const stepMs = "kernels" in j && typeof j.step_ms === "number" ? j.step_ms : undefined;
  const device = "kernels" in j && typeof j.device === "string" ? j.device : undefined;
  return { kernels, stepMs, device };
}
