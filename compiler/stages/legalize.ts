/**
 * Per-target legalization of the kernels' binding declarations. A plan's bindings (and so their access)
 * are one list shared by every target's source, so the rules of every target being compiled apply to it.
 * WebGPU: two ranges of one buffer in one dispatch, one written, are both declared read_write (WebGPU checks
 * usage per buffer); a buffer over the binding limit is bound as several ranges (plan/binding_ranges.ts).
 * CUDA needs no rule (DESIGN.md, notes: compiler/stages/legalize.ts).
 */
import { rangeBytes } from "../../plan/binding_ranges.ts";
import { storedBytes } from "../../plan/plan.ts";
import type { Kernel } from "../kernel_ir/ir.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import type { Language } from "../targets/target.ts";
import { type KernelState, type LibraryGemm, need } from "./state.ts";

interface RuleContext {
  readonly slotOf: (buffer: number) => number;
  readonly maxBindingBytes?: number;
}

type Rule = (k: Kernel, ctx: RuleContext) => Kernel;

const readWriteSharedBuffers: Rule = (k, { slotOf }) => {
  const written = new Set(k.bindings.filter((b) => b.access !== "read").map((b) => slotOf(b.buffer)));
  if (!k.bindings.some((b) => b.access === "read" && written.has(slotOf(b.buffer)))) return k;
  return {
    ...k,
    bindings: k.bindings.map((b) =>
      b.access === "read" && written.has(slotOf(b.buffer)) ? { ...b, access: "read_write" as const } : b
    ),
  };
};

const rangesOverBindingLimit: Rule = (k, { maxBindingBytes }) => {
  if (maxBindingBytes === undefined) return k;
  const over = (b: Kernel["bindings"][number]) => b.elements * storedBytes(b.t) > maxBindingBytes;
  if (!k.bindings.some(over)) return k;
  return {
    ...k,
    bindings: k.bindings.map((b) =>
      over(b) ? { ...b, rangeElements: rangeBytes(maxBindingBytes) / storedBytes(b.t) } : b
    ),
  };
};

export const LEGALIZE_RULES: Readonly<Record<Language, readonly Rule[]>> = {
  wgsl: [readWriteSharedBuffers, rangesOverBindingLimit],
  cuda: [],
  c: [],
};

const NAME = "legalize";

export const legalizeStage: Stage<KernelState> = {
  name: NAME,
  about: "per-target rules on binding declarations (WebGPU: ranges of one written buffer are read_write; " +
    "a buffer over the binding limit is bound as several ranges)",
  run: (s) => {
    const memory = need(s.memory, "the memory plan", NAME);
    const ctx: RuleContext = {
      slotOf: (b: number) => memory.slotOf.get(b)!,
      maxBindingBytes: s.options.maxBindingBytes,
    };
    const rules = LEGALIZE_RULES[s.options.target.language];
    const legal = (k: Kernel) => rules.reduce((x, rule) => rule(x, ctx), k);
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
