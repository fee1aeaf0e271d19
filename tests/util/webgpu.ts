/**
 * Shared helpers for tests that run on WebGPU (lavapipe in CI): one device per test file, or the reason
 * there is none, and a tiny Plan builder for hand-written kernels.
 *
 *   const gpu = await testGpu();
 *   Deno.test({ name: "…", ignore: !gpu.ctx, fn: async () => { const ctx = gpu.ctx!; … } });
 */
import { emitWGSL } from "../../compiler/codegen/wgsl.ts";
import type { Kernel } from "../../compiler/kernel_ir/ir.ts";
import type { BufferRole, Plan, PlanBuffer, PlanDType, PlanStep } from "../../plan/plan.ts";
import { type GpuContext, openWebGPU } from "../../runtime/webgpu/device.ts";

export type TestGpu = { ctx: GpuContext; skip?: undefined } | { ctx?: undefined; skip: string };

let opened: Promise<TestGpu> | undefined;

/** The test device (opened once per process), or why WebGPU tests are skipped (printed once). */
export function testGpu(): Promise<TestGpu> {
  opened ??= openWebGPU().then((r): TestGpu => {
    if ("unavailable" in r) {
      const hint = Deno.env.get("DENO_WEBGPU_BACKEND") ? "" : " (DENO_WEBGPU_BACKEND is not set)";
      console.log(`WebGPU tests skipped: ${r.unavailable}${hint}`);
      return { skip: r.unavailable };
    }
    return { ctx: r };
  });
  return opened;
}

/** Buffers of `n` elements each, from "name:dtype name:dtype ...". */
export const vectors = (n: number, spec: string): TestBuffer[] =>
  spec.split(" ").map((s) => ({ name: s.split(":")[0], dtype: s.split(":")[1] as PlanDType, shape: [n] }));

export interface TestBuffer {
  readonly name: string;
  readonly dtype: PlanDType;
  readonly shape: readonly number[];
  /** Defaults to "input" for buffers no kernel writes, else "output". */
  readonly role?: BufferRole;
}

const logicalBytes: Record<PlanDType, number> = { f32: 4, f16: 2, bf16: 2, i32: 4, u32: 4, bool: 1 };

/**
 * A Plan running `kernels` in order over `buffers` (each in a slot of its own). Kernel bindings refer to
 * buffers by index in `buffers` (KBinding.buffer). Kernels are emitted with emitWGSL unless `wgsl`
 * overrides a kernel's source by name.
 */
export function planOf(
  kernels: readonly Kernel[],
  buffers: readonly TestBuffer[],
  opts: { graph?: string; steps?: readonly PlanStep[]; wgsl?: Record<string, string> } = {},
): Plan {
  const written = new Set(
    kernels.flatMap((k) => k.bindings.filter((b) => b.access !== "read").map((b) => b.buffer)),
  );
  const planBuffers: PlanBuffer[] = buffers.map((b, id) => {
    const n = b.shape.reduce((a, c) => a * c, 1);
    return {
      id,
      name: b.name,
      dtype: b.dtype,
      shape: [...b.shape],
      bytes: n * logicalBytes[b.dtype],
      role: b.role ?? (written.has(id) ? "output" : "input"),
      slot: id,
    };
  });
  const byRole = (role: BufferRole) =>
    Object.fromEntries(planBuffers.filter((b) => b.role === role).map((b) => [b.name, b.id]));
  return {
    version: 2,
    graph: opts.graph ?? "test",
    target: "lavapipe",
    language: "wgsl",
    buffers: planBuffers,
    slots: planBuffers.map((b) => ({
      id: b.id,
      bytes: b.shape.reduce((a, c) => a * c, 1) * (b.dtype === "f16" || b.dtype === "bf16" ? 2 : 4),
    })),
    inputs: byRole("input"),
    params: byRole("param"),
    outputs: byRole("output"),
    kernels: kernels.map((k) => {
      const emitted = emitWGSL(k);
      const code = opts.wgsl?.[k.name];
      return {
        name: k.name,
        kind: k.kind,
        bindings: k.bindings.map((b, index) => ({ index, name: b.name, buffer: b.buffer, access: b.access })),
        source: code === undefined ? emitted : { ...emitted, code },
        about: k.about,
        bytesRead: 0,
        bytesWritten: 0,
        flops: 0,
      };
    }),
    steps: opts.steps ?? kernels.map((_, kernel) => ({ op: "launch" as const, kernel })),
    updates: [],
  };
}
