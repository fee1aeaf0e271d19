/**
 * The flat gradient rule of the storage policy (storage_precision.ts): which in-place flat gradient
 * vectors, and which of their pieces, are stored in the low precision on CUDA plans with library
 * GEMMs. The optimizer reads the flat gradient twice (the global-norm pass and LAMB's phase 1): stored
 * f16/bf16, both move 2 bytes of it per parameter, and every kernel that writes a piece writes 2. All of a
 * vector narrows or none (what keeps it f32: DESIGN.md, notes: compiler/storage/flat_gradients.ts).
 */
import { byteSize, type DType, type Graph, type NodeId } from "../../ir/mod.ts";
import type { FusionResult } from "../fusion/types.ts";
import { GRAD_PREFIX } from "../training_graph/autodiff.ts";
import { PLAN_OFFSET_ALIGN } from "../../plan/plan.ts";

/** The flat gradient vectors, their pieces and the outputs viewing them, all stored `low`. */
export function flatGradientNodes(g: Graph, fusion: FusionResult, low: DType): Set<NodeId> {
  const outputs = new Set(g.outputs.values());
  // Each gradient output and the values under its reshapes: id -> the reshapes above it that are outputs.
  const gradient = new Map<NodeId, NodeId[]>();
  for (const [name, o] of g.outputs) {
    if (!name.startsWith(GRAD_PREFIX)) continue;
    const chain: NodeId[] = [];
    for (let at = o;; at = g.nodes[at].inputs[0]) {
      gradient.set(at, [...(gradient.get(at) ?? []), ...chain]);
      if (g.nodes[at].op !== "reshape") break;
      chain.push(at);
    }
  }
  const pieces = new Map<NodeId, NodeId[]>(); // concat -> its placed parts
  for (const [p, where] of fusion.inPlace.placed) {
    pieces.set(where.concat, [...(pieces.get(where.concat) ?? []), p]);
  }
  const out = new Set<NodeId>();
  for (const [c, parts] of pieces) {
    if (g.nodes[c].type.dtype !== "f32" || outputs.has(c)) continue;
    const fits = parts.every((p) => {
      const k = fusion.kernelOf[p];
      if (k < 0 || !gradient.has(p) || g.nodes[p].type.dtype !== "f32") return false;
      if (fusion.kernels[k].kind === "scatter" && fusion.kernels[k].anchor === p) return false;
      return (fusion.inPlace.placed.get(p)!.elementOffset * byteSize(low)) % PLAN_OFFSET_ALIGN === 0;
    });
    if (!fits) continue;
    out.add(c);
    for (const p of parts) {
      out.add(p);
      // Reshapes of the piece that a kernel writes to a buffer of their own (the outputs above).
      for (const o of gradient.get(p)!) if (fusion.kernelOf[o] >= 0 && fusion.materialized.has(o)) out.add(o);
    }
  }
  return out;
}
