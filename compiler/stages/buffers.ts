/**
 * Buffer assignment: one plan buffer per graph input and parameter, per kernel root (an output or an
 * activation), and per flat vector assembled in place (the buffers of its parts sit inside it; placed by
 * the memory plan).
 */
import { byteSize, type NodeId, numel } from "../../ir/mod.ts";
import type { BufferRole } from "../../plan/plan.ts";
import type { Stage } from "../pipeline.ts";
import { type KernelState, need, type StateBuffer, storedTypeOf } from "./state.ts";

/** A buffer for node `id`'s value, numbered after `buffers`. */
export function nodeBuffer(
  s: KernelState,
  buffers: readonly StateBuffer[],
  id: NodeId,
  role: BufferRole,
  name?: string,
): StateBuffer {
  const n = s.graph.nodes[id];
  const dtype = storedTypeOf(s, id);
  return {
    id: buffers.length,
    name: name ?? `%${id} ${n.op}`,
    dtype,
    shape: [...n.type.shape],
    bytes: numel(n.type.shape) * byteSize(dtype),
    role,
  };
}

export const buffersStage: Stage<KernelState> = {
  name: "buffers",
  about: "one buffer per input, parameter, kernel root and in-place flat vector",
  run: (s) => {
    const g = s.graph;
    const fusion = need(s.fusion, "the fusion", "buffers");
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
    return { ...s, buffers, bufferOfNode };
  },
};
