/** Who reads each node, and graph queries built on it that passes before and after fusion share. */
import type { DType, Graph, NodeId } from "../../ir/mod.ts";
import { isElementwise, isMovement } from "../../ir/ops.ts";

export function usersOf(g: Graph): NodeId[][] {
  const users: NodeId[][] = g.nodes.map(() => []);
  for (const n of g.nodes) {
    for (const i of new Set(n.inputs)) users[i].push(n.id);
  }
  return users;
}

/**
 * Nodes computable at any index from constants and buffers alone, without a kernel of their own (with
 * `fuse` false, only constants: the unfused baseline computes everything else in a kernel).
 */
export function inlineNodes(g: Graph, fuse: boolean): Uint8Array {
  const inline = new Uint8Array(g.nodes.length);
  const cheap = (i: NodeId) => inline[i] === 1 || g.nodes[i].op === "input" || g.nodes[i].op === "param";
  for (const n of g.nodes) {
    if (n.op === "const") inline[n.id] = 1;
    else if (!fuse) continue;
    else if (n.op === "iota") inline[n.id] = 1;
    else if (n.op === "random_uniform") inline[n.id] = cheap(n.inputs[0]) ? 1 : 0;
    else if (isMovement(n.op)) inline[n.id] = n.inputs.every(cheap) ? 1 : 0;
    else if (n.op === "cast") inline[n.id] = cheap(n.inputs[0]) ? 1 : 0; // a conversion on load is free
    else if (isElementwise(n.op)) inline[n.id] = n.inputs.every((i) => inline[i] === 1) ? 1 : 0;
  }
  return inline;
}

/** Views that keep a value's elements (no broadcast, concat or padding): a value read through them is itself. */
export const VIEW_OPS: ReadonlySet<string> = new Set(["reshape", "permute", "slice"]);

/**
 * Parameters every use of which rounds them to `low` (a cast, possibly through views): the weights of an
 * inference graph's GEMMs. They are stored low, so the host's upload rounds them once instead of every
 * GEMM on every call, the GEMMs read half the bytes, and a library GEMM (cuBLASLt, a BLAS) can read them
 * as they are stored (gemm_library.ts refuses an f32 buffer rounded on load). The value each GEMM sees is
 * unchanged: the upload rounds to nearest even exactly as the cast does. A parameter a training step
 * updates reaches the flat vector or an output, or is read in f32 by the update, so it stays f32.
 */
export function weightsReadOnlyLow(g: Graph, low: DType, users: readonly NodeId[][]): NodeId[] {
  const outputs = new Set(g.outputs.values());
  const onlyRounded = (id: NodeId): boolean =>
    users[id].length > 0 && !outputs.has(id) && users[id].every((u) => {
      const n = g.nodes[u];
      if (n.op === "cast") return n.attrs.to === low;
      return VIEW_OPS.has(n.op) && onlyRounded(u);
    });
  return g.nodes.filter((n) => n.op === "param" && n.type.dtype === "f32" && onlyRounded(n.id)).map((n) =>
    n.id
  );
}
