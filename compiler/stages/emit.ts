/**
 * Emission: each kernel rendered in the target's language without its description (the plan keeps that in
 * PlanKernel.about, and kernels_generated/ writes it into the file header), so that identical kernels
 * render identically (share_sources.ts groups them next); the plan's kernels with their costs, bindings
 * and library GEMMs; the Plan itself.
 */
import type { Plan, PlanKernel } from "../../plan/plan.ts";
import type { Kernel } from "../kernel_ir/ir.ts";
import { kernelCost } from "../kernel_ir/cost.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import { type KernelState, need } from "./state.ts";

const NAME = "emit";

const planBindings = (k: Kernel) =>
  k.bindings.map((b, index) => ({
    index,
    name: b.name,
    buffer: b.buffer,
    access: b.access,
    ...(b.rangeElements !== undefined ? { rangeElements: b.rangeElements } : {}),
  }));

export const emitStage: Stage<KernelState> = {
  name: NAME,
  about: "each kernel rendered in the target's language (WGSL, CUDA C, C); the Plan assembled",
  run: (s, ctx) => {
    const kernels = need(s.kernels, "lowered kernels", NAME);
    const buffers = need(s.buffers, "buffers", NAME);
    const schedule = need(s.schedule, "the schedule", NAME);
    const memory = need(s.memory, "the memory plan", NAME);
    const gemmOf = s.gemmOf ?? new Map();
    const t = s.options.target;
    const render = s.options.render === false
      ? () => ({ code: "", grid: [0, 0, 0] as const, workgroupSize: 0 })
      : (k: Kernel) => t.emit({ ...k, about: [] });
    const flash = s.flash ?? new Map();
    const planKernels: PlanKernel[] = kernels.map((k, i) => {
      const fl = flash.get(i);
      const base = { name: k.name, kind: k.kind, bindings: planBindings(k), about: k.about };
      // Written in CUDA C directly (compiler/codegen/cuda_flash.ts).
      if (fl) return { ...base, kind: "flash-attention", ...fl };
      const lib = gemmOf.get(i);
      const epi = lib?.epilogue;
      return {
        ...base,
        ...kernelCost(k),
        source: render(k),
        ...(lib
          ? {
            library: {
              call: lib.call,
              ...(epi
                ? { epilogue: { name: epi.name, bindings: planBindings(epi), source: render(epi) } }
                : {}),
            },
          }
          : {}),
      };
    });
    if (ctx.flags.level >= 4) { for (const k of planKernels) ctx.log(4, `// ${k.name}\n${k.source.code}`); }
    const plan: Plan = {
      version: 2,
      graph: s.graph.name,
      target: t.name,
      language: t.language,
      buffers: buffers.map((b) => {
        const offset = memory.offsetOf.get(b.id);
        return { ...b, slot: memory.slotOf.get(b.id)!, ...(offset ? { offset } : {}) };
      }),
      slots: memory.slots,
      inputs: schedule.inputs,
      params: schedule.params,
      outputs: schedule.outputs,
      kernels: planKernels,
      steps: schedule.steps,
      updates: schedule.updates,
    };
    return { ...s, plan };
  },
};
