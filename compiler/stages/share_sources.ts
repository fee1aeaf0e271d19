/**
 * One source for identical kernels: the same fusion in every encoder layer lowers to kernels that differ
 * only in their names, descriptions and bound buffers, none of which is in the source. This stage groups
 * the kernels of equal source and gives every kernel of a group the group's one TargetKernel; every
 * consumer goes by these groups (kernels_generated/ files, WebGPU pipelines, CUDA modules). Why sources,
 * not kernel IR, are compared: DESIGN.md, notes: compiler/stages/share_sources.ts.
 */
import type { PlanKernel, TargetKernel } from "../../plan/plan.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import { type KernelState, need } from "./state.ts";

/** For each item, the index of the first one whose source (`sourceOf`) has the same code; -1 without one. */
export function sourceGroups<T>(items: readonly T[], sourceOf: (x: T) => TargetKernel | undefined): number[] {
  const first = new Map<string, number>();
  return items.map((x, i) => {
    const code = sourceOf(x)?.code;
    if (code === undefined) return -1;
    const have = first.get(code);
    if (have !== undefined) return have;
    first.set(code, i);
    return i;
  });
}

const epilogueOf = (k: PlanKernel) => k.library?.epilogue?.source;

export const shareSourcesStage: Stage<KernelState> = {
  name: "share-sources",
  about: "kernels of equal source (the same fusion in every layer) are grouped and share one source object",
  run: (s) => {
    const plan = need(s.plan, "the plan", "share-sources");
    const groups = sourceGroups(plan.kernels, (k) => k.source);
    const epilogues = sourceGroups(plan.kernels, epilogueOf);
    const kernels = plan.kernels.map((k, i): PlanKernel => {
      const e = k.library?.epilogue;
      return {
        ...k,
        source: plan.kernels[groups[i]].source,
        ...(e
          ? {
            library: { ...k.library!, epilogue: { ...e, source: epilogueOf(plan.kernels[epilogues[i]])! } },
          }
          : {}),
      };
    });
    return { ...s, plan: { ...plan, kernels }, shared: { kernels: groups, epilogues } };
  },
};
