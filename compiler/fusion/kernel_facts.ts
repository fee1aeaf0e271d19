/** Facts about a fused kernel that fusion passes and the lowering both need. */
import type { Graph, NodeId } from "../../ir/mod.ts";
import { isElementwise, isMovement, isReduce } from "../../ir/ops.ts";
import type { FusedKernel, FusionResult } from "./types.ts";

/** The materialized nodes a kernel reads, looking through inline nodes and views (computed where read). */
export function readsOf(g: Graph, r: FusionResult, k: FusedKernel): Set<NodeId> {
  const out = new Set<NodeId>();
  const seen = new Set<NodeId>();
  const visit = (x: NodeId) => {
    if (seen.has(x)) return;
    seen.add(x);
    if (k.members.has(x) || !r.materialized.has(x)) g.nodes[x].inputs.forEach(visit);
    else out.add(x);
  };
  for (const m of k.members) g.nodes[m].inputs.forEach(visit);
  return out;
}

/**
 * A kernel's reductions in stages: stage 0 if a reduction's operand needs no other in-kernel reduction,
 * else 1 + the latest stage it needs (LayerNorm: the mean, then the variance of the centred values),
 * looking through the views between members.
 */
export function reductionStages(g: Graph, k: FusedKernel): NodeId[][] {
  const depth = new Map<NodeId, number>(); // -1: no reduction below
  const stage = new Map<NodeId, number>();
  const visit = (id: NodeId): number => {
    const n = g.nodes[id];
    // A view (a movement op that several kernels read, e.g. a broadcast of a row-level root, or an
    // elementwise chain recomputed where read, fusion/remat.ts) is computed where it is read, so a member
    // read through it counts like a member read directly. (A non-member stored by another kernel cannot
    // depend on this kernel's members: that kernel would run both before and after this one.)
    if (!k.members.has(id) && !isMovement(n.op) && !isElementwise(n.op)) return -1;
    const have = depth.get(id);
    if (have !== undefined) return have;
    let d = -1;
    for (const i of n.inputs) d = Math.max(d, visit(i));
    if (isReduce(n.op)) stage.set(id, ++d);
    depth.set(id, d);
    return d;
  };
  for (const m of k.members) visit(m);
  const stages: NodeId[][] = [];
  for (const [id, s] of [...stage].sort((a, b) => a[0] - b[0])) (stages[s] ??= []).push(id);
  return stages.filter((s) => s !== undefined);
}

/**
 * The per-part column sums a row-block kernel computes beside its row reductions (FusedKernel.rowBlock):
 * members reducing a [parts, rowBlock, …] view over axis 1. Empty for other kernels.
 */
export function blockPartials(g: Graph, k: FusedKernel): NodeId[] {
  if (!k.rowBlock) return [];
  return [...k.members].filter((m) => isBlockPartial(g, m, k.rowBlock!)).sort((a, b) => a - b);
}

/** Is `id` a sum (or max) over axis 1 of a [parts, block, …] value: one part's column sums? */
export function isBlockPartial(g: Graph, id: NodeId, block: number): boolean {
  const n = g.nodes[id];
  if (!isReduce(n.op)) return false;
  const axes = n.attrs.axes as number[];
  const shape = g.nodes[n.inputs[0]].type.shape;
  return axes.length === 1 && axes[0] === 1 && shape.length >= 3 && shape[1] === block;
}
