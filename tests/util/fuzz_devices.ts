/**
 * The devices the fuzzer (cases/fuzz/) runs plans on: WebGPU (lavapipe in CI) through the runtime's
 * executor, the emitted CUDA on the CPU through g++ and the shim of tests/util/cuda_cpu.ts, and the native
 * CPU backend (emitted C through cc, GEMMs on oneDNN or OpenBLAS) through its own executor. Shared by the fuzz tests
 * and `deno task fuzz` (tools/fuzz.ts).
 */
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { makeTarget } from "../../compiler/targets/target.ts";
import type { FuzzDevice } from "../../cases/fuzz/check.ts";
import { type CpuContext, CpuExecutor } from "../../runtime/cpu/cpu_executor.ts";
import type { GpuContext } from "../../runtime/webgpu/device.ts";
import { WebGPUExecutor } from "../../runtime/webgpu/webgpu_executor.ts";
import { runOnCpu } from "./cuda_cpu.ts";

export function webgpuDevice(ctx: GpuContext): FuzzDevice {
  return {
    name: "webgpu",
    target: makeTarget(PROFILES.lavapipe, "wgsl"),
    async run(plan, feeds) {
      const executor = await WebGPUExecutor.create(ctx, plan);
      try {
        return new Map(Object.entries(await executor.run(feeds)));
      } finally {
        executor.destroy();
      }
    },
  };
}

/** Emitted CUDA run on the CPU; `library`: GEMMs as the plan's cuBLASLt calls (the CUDA executor's default). */
export function cudaShimDevice(library: boolean): FuzzDevice {
  return {
    name: "cuda-shim",
    target: makeTarget(PROFILES.lavapipe, "cuda"),
    flags: library ? undefined : "--template-gemms",
    async run(plan, feeds) {
      const dir = await Deno.makeTempDir({ prefix: "bertfuse-fuzz-" });
      try {
        return await runOnCpu(dir, plan, feeds, library, Deno.env.get("FUZZ_CXX_OPT") ?? "-O0");
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  };
}

/**
 * The CPU backend's executor on the plan's C kernels; `blas`: GEMMs as library sgemm calls where they
 * qualify (the backend's default), else every GEMM as the C template kernel. A batch's kernels are
 * compiled together (the executor joins distinct sources into a few translation units), so the C compiler
 * runs a few times per batch of graphs, not once per graph.
 */
export function cpuDevice(ctx: CpuContext, blas: boolean): FuzzDevice {
  return {
    name: "cpu",
    target: makeTarget(PROFILES.lavapipe, "c"),
    flags: blas ? undefined : "--template-gemms",
    async run(plan, feeds) {
      const executor = await CpuExecutor.create(blas ? ctx : { ...ctx, gemms: "template" }, plan);
      try {
        return new Map(Object.entries(await executor.run(feeds)));
      } finally {
        executor.destroy();
      }
    },
  };
}
