/** Who reads each node, and graph queries built on it that passes before and after fusion share. */
import type { DType, Graph, NodeId } from "../../ir/mod.ts";

export function usersOf(g: Graph): NodeId[][] {
  const users: NodeId[][] = g.nodes.map(() => []);
  for (const n of g.nodes) {
    for (const i of new Set(n.inputs)) users[i].push(n.id);
  }
  return users;
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
