/**
 * Buffer assignment: one plan buffer per graph input and parameter, per kernel root (an output or an
 * activation), per flat vector assembled in place (the buffers of its parts sit inside it; placed by
 * the memory plan), and per output that is a view of such a part (output_views.ts: no kernel writes it,
 * the memory plan places it where the part is).
 */
import { byteSize, type DType, type NodeId, numel } from "../../ir/mod.ts";
import type { BufferRole } from "../../plan/plan.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import { type KernelState, need, type StateBuffer, storedTypeOf } from "./state.ts";

/** A buffer numbered after `buffers`. */
const newBuffer = (
  buffers: readonly StateBuffer[],
  name: string,
  dtype: DType,
  shape: readonly number[],
  role: BufferRole,
): StateBuffer => ({
  id: buffers.length,
  name,
  dtype,
  shape: [...shape],
  bytes: numel(shape) * byteSize(dtype),
  role,
});

/** A buffer for node `id`'s value, numbered after `buffers`. */
export function nodeBuffer(
  s: KernelState,
  buffers: readonly StateBuffer[],
  id: NodeId,
  role: BufferRole,
  name?: string,
): StateBuffer {
  const n = s.graph.nodes[id];
  return newBuffer(buffers, name ?? `%${id} ${n.op}`, storedTypeOf(s, id), n.type.shape, role);
}

export const buffersStage: Stage<KernelState> = {
  name: "buffers",
  about:
    "one buffer per input, parameter, kernel root, in-place flat vector and output viewing a part of one",
  run: (s) => {
    const g = s.graph;
    const fusion = need(s.fusion, "the fusion", "buffers"), views = s.views ?? new Map<NodeId, NodeId>();
    const buffers: StateBuffer[] = [];
    const bufferOfNode = new Map<NodeId, number>();
    const add = (id: NodeId, role: BufferRole, name?: string) => {
      const b = nodeBuffer(s, buffers, id, role, name);
      buffers.push(b);
      bufferOfNode.set(id, b.id);
    };
    const outputNodes = new Set(g.outputs.values());
    for (const n of g.nodes) {
      if (n.op === "input" || n.op === "param") add(n.id, n.op, String(n.attrs.name));
    }
    const outputName = new Map<NodeId, string>();
    for (const [name, id] of g.outputs) if (!outputName.has(id)) outputName.set(id, name);
    const kernelValue = (id: NodeId) =>
      add(id, outputNodes.has(id) ? "output" : "activation", outputName.get(id));
    for (const k of fusion.kernels) k.roots.forEach(kernelValue);
    fusion.inPlace.concats.forEach(kernelValue);
    // A buffer no node holds: a flash site's log-sum-exp per query row, written by its forward and read by
    // its backward; a library call's scratch product, which an epilogue kernel reads (library-calls stage).
    const scratch = (name: string, dtype: DType, shape: readonly number[]) =>
      buffers.push(newBuffer(buffers, name, dtype, shape, "activation")) - 1;
    const flashLse = new Map<NodeId, number>();
    for (const { what, site: { o, spec } } of s.flashParts?.values() ?? []) {
      if (what === "forward") {
        flashLse.set(o, scratch(`%${o} flash_logsumexp`, "f32", [spec.batch, spec.heads, spec.seqQ]));
      }
    }
    const scratchOf = new Map<number, number>();
    for (const [i, { direct, scratchDtype: dtype = "f32" }] of s.calls ?? []) {
      const mm = g.nodes[fusion.kernels[i].anchor!];
      if (!direct) {
        scratchOf.set(i, scratch(`%${mm.id} matmul product ${dtype} (cuBLASLt)`, dtype, mm.type.shape));
      }
    }
    const viewOf = new Map<number, number>();
    for (const [o, p] of views) {
      add(o, "output", outputName.get(o));
      viewOf.set(bufferOfNode.get(o)!, bufferOfNode.get(p)!);
    }
    return { ...s, fusion, buffers, bufferOfNode, viewOf, scratchOf, ...(flashLse.size ? { flashLse } : {}) };
  },
};
