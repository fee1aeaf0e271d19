/**
 * Helpers for passes that rebuild a graph front to back with some nodes dropped or merged: a node is
 * copied with its operands renumbered, and the outputs follow their nodes. Copies go through
 * `Graph.add`, so every rebuilt node is type-checked again.
 */
import type { Graph, Node, NodeId } from "../../ir/mod.ts";

/** Appends a copy of `n` (op, attributes, type, location) to `out`, reading `inputs` instead of its own. */
export function copyNode(out: Graph, n: Node, inputs: readonly NodeId[]): NodeId {
  return out.add(n.op, inputs, n.attrs, n.type, n.loc);
}

/**
 * Sets `out`'s outputs to the new ids of `g`'s outputs, in `g`'s order, and copies its node groups: a role
 * or node whose node is gone (a new id below 0) is left out.
 */
export function copyOutputs(g: Graph, out: Graph, newId: ArrayLike<NodeId>): void {
  for (const [name, id] of g.outputs) out.setOutput(name, newId[id]);
  const kept = (id: NodeId) => newId[id] >= 0;
  for (const { roles, nodes, ...rest } of g.groups) {
    out.groups.push({
      ...rest,
      roles: Object.fromEntries(
        Object.entries(roles).filter(([, id]) => kept(id)).map(([r, id]) => [r, newId[id]]),
      ),
      nodes: [...new Set(nodes.filter(kept).map((id) => newId[id]))],
    });
  }
}
