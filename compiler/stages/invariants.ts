/**
 * The invariants of the kernel-level state, checked after every stage (compiler/pipeline/stage_runner.ts blames the
 * stage that broke one). Each part is checked once it exists; the checks are linear in the kernels'
 * members and bindings, so they run on every compile.
 */
import { storedSize } from "../../plan/plan.ts";
import { readsOf } from "../fusion/kernel_facts.ts";
import type { FusionResult } from "../fusion/types.ts";
import type { Graph } from "../../ir/mod.ts";
import type { KernelState } from "./state.ts";

/** The first broken invariant of `s`, or undefined. */
export function findProblem(s: KernelState): string | undefined {
  if (s.fusion) {
    const p = fusionProblem(s.graph, s.fusion);
    if (p) return p;
  }
  const buffers = s.buffers;
  if (buffers) {
    const bad = buffers.findIndex((b, i) => b.id !== i);
    if (bad >= 0) return `buffer ${bad} has id ${buffers[bad].id}`;
    const roots = s.fusion?.kernels.flatMap((k) => k.roots) ?? [];
    const sources = s.graph.nodes.filter((n) => n.op === "input" || n.op === "param").map((n) => n.id);
    for (const x of [...sources, ...roots, ...(s.fusion?.inPlace.concats ?? [])]) {
      if (!s.bufferOfNode?.has(x)) return `%${x} ${s.graph.nodes[x].op} lives in a buffer but has none`;
    }
  }
  const hasBuffer = (b: number) => buffers !== undefined && b >= 0 && b < buffers.length;
  if (s.kernels) {
    if (s.fusion && s.kernels.length !== s.fusion.kernels.length) {
      return `${s.kernels.length} kernels for ${s.fusion.kernels.length} fused kernels`;
    }
    const epilogues = [...(s.gemmOf?.values() ?? [])].flatMap((l) => (l.epilogue ? [l.epilogue] : []));
    for (const k of [...s.kernels, ...epilogues]) {
      for (const b of k.bindings) {
        if (!hasBuffer(b.buffer)) {
          return `kernel ${k.name} binds ${b.name} to buffer ${b.buffer}, which does not exist`;
        }
      }
      if (new Set(k.bindings.map((b) => b.name)).size !== k.bindings.length) {
        return `kernel ${k.name} has two bindings of one name`;
      }
    }
  }
  if (s.schedule) {
    for (const st of s.schedule.steps) {
      if (st.op === "launch" && !(st.kernel >= 0 && st.kernel < (s.kernels?.length ?? 0))) {
        return `a step launches kernel ${st.kernel}, which does not exist`;
      }
      if (st.op === "copy" && !(hasBuffer(st.src) && hasBuffer(st.dst))) {
        return `a step copies buffer ${st.src} to ${st.dst}, one of which does not exist`;
      }
    }
    for (const [name, b] of Object.entries(s.schedule.outputs)) {
      if (!hasBuffer(b)) return `output '${name}' is buffer ${b}, which does not exist`;
    }
  }
  if (s.memory && buffers) {
    for (const b of buffers) {
      const slot = s.memory.slots[s.memory.slotOf.get(b.id) ?? -1];
      if (!slot) return `buffer ${b.id} (${b.name}) has no slot`;
      const end = (s.memory.offsetOf.get(b.id) ?? 0) + storedSize(b);
      if (end > slot.bytes) {
        return `buffer ${b.id} (${b.name}) ends at byte ${end} of its ${slot.bytes}-byte slot`;
      }
    }
  }
  if (s.plan && s.options.render !== false) {
    for (const k of s.plan.kernels) {
      if (!k.source?.code) return `kernel ${k.name} has no ${s.options.target.language} source`;
    }
  }
  return undefined;
}

/** Fusion's invariants: kernels numbered in order, members and roots consistent, a valid schedule. */
function fusionProblem(g: Graph, f: FusionResult): string | undefined {
  const writer = new Map<number, number>();
  for (const [i, k] of f.kernels.entries()) {
    if (k.id !== i) return `fused kernel ${i} has id ${k.id}`;
    if (k.roots.length === 0) return `fused kernel ${i} writes nothing`;
    for (const m of k.members) {
      if (f.kernelOf[m] !== i) return `%${m} is a member of kernel ${i} but kernelOf says ${f.kernelOf[m]}`;
    }
    for (const r of k.roots) {
      if (!k.members.has(r)) return `root %${r} of kernel ${i} is not a member`;
      if (!f.materialized.has(r)) return `root %${r} of kernel ${i} is not materialized`;
      writer.set(r, i);
    }
  }
  for (const [i, k] of f.kernels.entries()) {
    for (const x of readsOf(g, f, k)) {
      const w = writer.get(x);
      if (w !== undefined && w >= i) return `kernel ${i} reads %${x}, which kernel ${w} writes no earlier`;
    }
  }
  return undefined;
}

export function verifyState(s: KernelState, stage: string): void {
  const problem = findProblem(s);
  if (problem) throw new Error(`after stage '${stage}': ${problem}`);
}
