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
  /**
   * GEMMs that qualify run as library calls (cuBLASLt on CUDA, a BLAS sgemm on the CPU), each carrying
   * its template kernel as the fallback; false: every GEMM a template kernel. WGSL has no library.
   */
  readonly libraryGemms: boolean;
}

export type TargetName = ProfileName;

const EMITTERS: Readonly<Record<Language, Emitter>> = { wgsl: emitWGSL, cuda: emitCUDA, c: emitC };

/** A target from a profile and a language: the named ones below, and tests' variants. */
export function makeTarget(
  profile: TargetProfile,
  language: Language,
  libraryGemms = language !== "wgsl",
): Target {
  return {
    ...profile,
    language,
    emit: EMITTERS[language],
    libraryGemms: libraryGemms && language !== "wgsl",
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

/**
 * Whether the target's GEMM calls write their raw products (cuBLASLt: epilogues, a stored sum as C with
 * beta 1, bias gradients): fusion then leaves a matmul's consumers to other kernels where a call can take
 * them. The CPU's BLAS call has no epilogue, so its plans keep the template's free epilogues.
 */
export const rawGemmOutputs = (t: Target): boolean => t.language === "cuda" && t.libraryGemms;
