/**
 * In-place updates: a step's new parameters and moments written over the old ones instead of into buffers
 * of their own that the runtime copies back after the step (Plan.updates). For bert-large that copy-back is
 * three 1.4 GB vectors (parameters, m, v) read and written every step, about 8 GB of traffic. An update
 * takes its source's place only where overwriting it early changes nothing; the kernel then binds the range
 * once (the conditions: DESIGN.md, notes: compiler/stages/in_place_updates.ts).
 */
import { isElementwise, type NodeId, numel } from "../../ir/mod.ts";
import type { KBinding, Kernel, KStmt } from "../kernel_ir/ir.ts";
import { mapStmts } from "../kernel_ir/walk.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import { type KernelState, need } from "./state.ts";

const NAME = "in-place-updates";

/**
 * Kernels whose threads own the elements they store: a loop kernel's thread its elements; a reduce kernel's
 * row its thread or workgroup, which reads the row (its reductions) before storing any element of it, with
 * a barrier between when a workgroup shares the row (compiler/lower/lower_kernel.ts lowerReduce).
 */
const IN_PLACE_KINDS = new Set(["loop", "reduce"]);

/** Renames the buffer every store to `from` writes. */
function renameStores(body: readonly KStmt[], from: string, to: string): KStmt[] {
  return mapStmts(body, (s) => s.k === "store" && s.buf === from ? { ...s, buf: to } : s);
}

/** `k` with value binding `v` folded into param binding `p`: one read_write binding of the range. */
function mergeBindings(k: Kernel, p: KBinding, v: KBinding): Kernel {
  return {
    ...k,
    bindings: k.bindings.filter((b) => b !== v).map((b) => (b === p ? { ...b, access: "read_write" } : b)),
    body: renameStores(k.body, v.name, p.name),
  };
}

/** `k` with value binding `v` bound to buffer `param` instead (a kernel that never reads the old value). */
function rebind(k: Kernel, v: KBinding, param: number): Kernel {
  return { ...k, bindings: k.bindings.map((b) => (b === v ? { ...b, buffer: param } : b)) };
}

export const inPlaceUpdatesStage: Stage<KernelState> = {
  name: NAME,
  about: "a step's new parameters and moments overwrite the old where nothing reads the old ones later",
  run: (s, ctx) => {
    const fusion = need(s.fusion, "the fusion", NAME);
    const buffers = need(s.buffers, "buffers", NAME);
    const bufferOfNode = need(s.bufferOfNode, "buffers", NAME);
    const schedule = need(s.schedule, "the schedule", NAME);
    const kernels = [...need(s.kernels, "lowered kernels", NAME)];
    const nodeOfBuffer = new Map<number, NodeId>();
    for (const [node, b] of bufferOfNode) nodeOfBuffer.set(b, node);
    const partsOf = (p: NodeId): number[] =>
      [...fusion.inPlace.placed].filter(([, w]) => w.concat === p).map(([part]) => bufferOfNode.get(part)!);
    const access = schedule.access.map((a) => ({ reads: [...a.reads], writes: [...a.writes] }));
    const aliasOf = new Map<number, number>();
    const updates = schedule.updates.filter(({ param, value }) => {
      const at = inPlace(param, value);
      if (typeof at === "string") {
        if (ctx.flags.level >= 3) {
          console.error(`in-place-updates: ${buffers[value].name} stays a copy: ${at}`);
        }
        return true;
      }
      const { step, kernel } = at;
      const p = kernels[kernel].bindings.find((b) => b.buffer === param);
      const v = kernels[kernel].bindings.find((b) => b.buffer === value)!;
      kernels[kernel] = p ? mergeBindings(kernels[kernel], p, v) : rebind(kernels[kernel], v, param);
      access[step].writes = access[step].writes.map((b) => (b === value ? param : b));
      aliasOf.set(value, param);
      return false;
    });
    if (aliasOf.size === 0) return s;
    return { ...s, kernels, schedule: { ...schedule, updates, access }, aliasOf };

    /** The step (and its kernel) that may write `value` over `param`, or why none may. */
    function inPlace(param: number, value: number): { step: number; kernel: number } | string {
      const pNode = nodeOfBuffer.get(param), vNode = nodeOfBuffer.get(value);
      if (pNode === undefined || vNode === undefined) return "not a node's buffer";
      if (fusion.inPlace.placed.has(vNode)) return "the new value is part of a flat vector";
      const writers = access.flatMap((a, i) => (a.writes.includes(value) ? [i] : []));
      if (writers.length !== 1) return `${writers.length} steps write it`;
      const k = writers[0];
      const step = schedule.steps[k];
      if (
        step.op !== "launch" || s.gemmOf?.has(step.kernel) ||
        !IN_PLACE_KINDS.has(fusion.kernels[step.kernel].kind)
      ) {
        return "not written by a loop or reduce kernel";
      }
      const old = new Set([param, ...partsOf(pNode)]);
      if (access.some((a, i) => i > k && [...a.reads, ...a.writes].some((b) => old.has(b)))) {
        return "a later step uses the old value";
      }
      if (access[k].writes.some((b) => old.has(b))) return "its kernel writes the old value too";
      // Inside K: every node computed there that reads P is elementwise over the whole space.
      const fk = fusion.kernels[step.kernel];
      const space = numel(fk.space);
      const computed = new Set<NodeId>();
      const visit = (x: NodeId) => {
        if (computed.has(x)) return;
        computed.add(x);
        for (const i of s.graph.nodes[x].inputs) if (!fusion.materialized.has(i)) visit(i);
      };
      fk.members.forEach(visit);
      for (const x of computed) {
        const n = s.graph.nodes[x];
        if (!n.inputs.includes(pNode)) continue;
        if (!isElementwise(n.op) || numel(n.type.shape) !== space) return `%${x} ${n.op} reads the old value`;
      }
      if (numel(s.graph.nodes[vNode].type.shape) !== space) return "not written over the kernel's space";
      const kernel = kernels[step.kernel];
      const p = kernel.bindings.filter((b) => b.buffer === param);
      const v = kernel.bindings.filter((b) => b.buffer === value);
      if (p.length === 0 && v.length === 1 && v[0].access === "write") {
        if (buffers[param].dtype !== buffers[value].dtype) return "the old and new values differ in type";
        return { step: k, kernel: step.kernel };
      }
      if (p.length !== 1 || v.length !== 1 || p[0].access !== "read" || v[0].access !== "write") {
        return "its kernel does not bind the old value once, read-only, and the new once, write-only";
      }
      if (p[0].t !== v[0].t || p[0].vector !== v[0].vector || buffers[param].dtype !== buffers[value].dtype) {
        return "the old and new bindings differ in type or vector width";
      }
      return { step: k, kernel: step.kernel };
    }
  },
  // Every update a copy after the step.
  skip: (s) => s,
};
