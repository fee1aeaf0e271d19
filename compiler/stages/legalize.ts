/**
 * Per-target legalization of the kernels' binding declarations. A plan's bindings (and so their access)
 * are one list shared by every target's source, so the rules of every target being compiled apply to it.
 *
 * WebGPU: two ranges of one flat vector bound by one kernel, one of them written. WebGPU validates usage
 * per buffer, not per range, and refuses a read-only and a writable binding of one buffer in a dispatch,
 * so every binding of that buffer is declared read_write (the ranges never overlap). CUDA needs no rule:
 * a const pointer to one range beside a writable pointer to another is fine there.
 */
import type { Kernel } from "../kernel_ir/ir.ts";
import type { Stage } from "../pipeline.ts";
import { type EmitTarget, type KernelState, type LibraryGemm, need } from "./state.ts";

type Rule = (k: Kernel, slotOf: (buffer: number) => number) => Kernel;

const readWriteSharedBuffers: Rule = (k, slotOf) => {
  const written = new Set(k.bindings.filter((b) => b.access !== "read").map((b) => slotOf(b.buffer)));
  if (!k.bindings.some((b) => b.access === "read" && written.has(slotOf(b.buffer)))) return k;
  return {
    ...k,
    bindings: k.bindings.map((b) =>
      b.access === "read" && written.has(slotOf(b.buffer)) ? { ...b, access: "read_write" as const } : b
    ),
  };
};

export const LEGALIZE_RULES: Readonly<Record<EmitTarget, readonly Rule[]>> = {
  wgsl: [readWriteSharedBuffers],
  cuda: [],
  c: [],
};

const NAME = "legalize";

export const legalizeStage: Stage<KernelState> = {
  name: NAME,
  about: "per-target rules on binding declarations (WebGPU: ranges of one written buffer are read_write)",
  run: (s) => {
    const memory = need(s.memory, "the memory plan", NAME);
    const slotOf = (b: number) => memory.slotOf.get(b)!;
    const targets = (Object.keys(s.options.emitters) as EmitTarget[]).filter((t) => s.options.emitters[t]);
    const rules = targets.flatMap((t) => LEGALIZE_RULES[t]);
    const legal = (k: Kernel) => rules.reduce((x, rule) => rule(x, slotOf), k);
    const kernels = need(s.kernels, "lowered kernels", NAME).map(legal);
    const gemmOf = s.gemmOf && new Map(
      [...s.gemmOf].map(([i, lib]): [number, LibraryGemm] => [
        i,
        lib.epilogue ? { ...lib, epilogue: legal(lib.epilogue) } : lib,
      ]),
    );
    return { ...s, kernels, ...(gemmOf ? { gemmOf } : {}), legalized: true };
  },
};
