/**
 * A target is one value: what lowering tunes (the profile's knobs), the language kernels are written in
 * and its emitter, and what the target implements as library calls. `compileGraph(graph, { target })`
 * builds one Plan for it, every kernel with one source (or one call carrying that source as its fallback).
 * The named targets are the ones the backends and `deno task compile --target` use; tests build variants
 * with `{ ...TARGETS.x, knob: value }`.
 */
import type { TargetKernel } from "../../plan/plan.ts";
import { emitC } from "../codegen/c.ts";
import { emitCUDA } from "../codegen/cuda.ts";
import { emitWGSL } from "../codegen/wgsl.ts";
import type { Kernel } from "../kernel_ir/ir.ts";
import { type ProfileName, PROFILES, type TargetProfile } from "./profiles.ts";

/** The languages kernels are emitted in: WGSL (WebGPU), CUDA C (NVRTC), C (the CPU backend's cc). */
export type Language = "wgsl" | "cuda" | "c";
export type Emitter = (k: Kernel) => TargetKernel;

export interface Target extends TargetProfile {
  readonly language: Language;
  readonly emit: Emitter;
  /** Its implementation table. */
  readonly implements: Implementations;
  /**
   * Whether a kernel's buffers are bound through a table of limited size (WebGPU's storage buffers per
   * shader stage), so that merges keep to a portable count; CUDA and C kernels take them as parameters.
   */
  readonly limitedBindings: boolean;
}

/** What a target runs as library calls or hand-written kernels instead of fused kernels. */
export interface Implementations {
  /**
   * GEMMs: `cublaslt` calls, which also take a bias or bias-gradient epilogue and a stored sum as C with
   * beta 1 (fusion then leaves a matmul's consumers to other kernels where a call can take them); BLAS
   * `sgemm` calls, which take none (the CPU's plans keep the template's free epilogues); or every GEMM as its
   * `template` kernel (WGSL has no library). A call carries its template kernel as the fallback.
   */
  readonly gemm: "cublaslt" | "sgemm" | "template";
  /** Training self-attention as the `flash` kernels (codegen/cuda_flash*.ts), where the knob asks. */
  readonly attention: "flash" | "kernels";
}

const IMPLEMENTATIONS: Readonly<Record<Language, Implementations>> = {
  wgsl: { gemm: "template", attention: "kernels" },
  cuda: { gemm: "cublaslt", attention: "flash" },
  c: { gemm: "sgemm", attention: "kernels" },
};

export type TargetName = ProfileName;

const EMITTERS: Readonly<Record<Language, Emitter>> = { wgsl: emitWGSL, cuda: emitCUDA, c: emitC };

/** A target from a profile and a language, with its language's implementation table. */
export function makeTarget(profile: TargetProfile, language: Language): Target {
  return {
    ...profile,
    language,
    emit: EMITTERS[language],
    implements: IMPLEMENTATIONS[language],
    limitedBindings: language === "wgsl",
  };
}

export const TARGETS: Readonly<Record<TargetName, Target>> = {
  lavapipe: makeTarget(PROFILES.lavapipe, "wgsl"),
  "webgpu-gpu": makeTarget(PROFILES["webgpu-gpu"], "wgsl"),
  cpu: makeTarget(PROFILES.cpu, "c"),
  "cuda-sm90": makeTarget(PROFILES["cuda-sm90"], "cuda"),
};

export const TARGET_NAMES = Object.keys(TARGETS) as TargetName[];

export const isTargetName = (s: string): s is TargetName => (TARGET_NAMES as string[]).includes(s);

/**
 * The WebGPU target for an adapter: a software one (lavapipe, SwiftShader: runtime/webgpu/software.ts)
 * runs a workgroup as a loop on a CPU core; a GPU gets `webgpu-gpu`.
 */
export const webgpuTarget = (software: boolean): Target => TARGETS[software ? "lavapipe" : "webgpu-gpu"];
