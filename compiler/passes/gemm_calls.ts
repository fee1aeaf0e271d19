/**
 * Which matmuls run as library calls, decided on the graph before fusion (where XLA runs its GEMM rewriter):
 * a matmul whose operands are values some kernel stores, read through views and casts, with the product's
 * batch axes, is a call. Fusion then treats a call that writes its raw product (cuBLASLt) as a kernel root
 * whose readers compute the rest; the library-calls stage derives each call's operands, epilogue and C from
 * stored dtypes and layouts, and a call it cannot derive runs its template kernel, the fallback.
 */
import { type Graph, type NodeId } from "../../ir/mod.ts";
import { inlineNodes } from "../graph/users.ts";

/** The matmuls that are calls, and why each other one is not. */
export interface GraphCalls {
  readonly calls: ReadonlySet<NodeId>;
  /**
   * The calls that write their raw product, every op on it left to the kernels reading it (cuBLASLt: an
   * epilogue kernel where the call cannot take the op); the others' calls run their fused kernel's
   * epilogue in their own pass (the CPU's sgemm blocks), so fusion joins their consumers as the template's.
   */
  readonly raw: ReadonlySet<NodeId>;
  readonly refused: ReadonlyMap<NodeId, string>;
}

/** What a call reads its operands through: strided views of a buffer, or a load that converts. */
const READ_THROUGH: ReadonlySet<string> = new Set(["cast", "reshape", "permute", "slice"]);

/** Why operand `id` of a matmul cannot be a library call's, or undefined when it can. */
function operandRefusal(g: Graph, inline: Uint8Array, id: NodeId, batch: readonly number[], what: string) {
  const shape = g.nodes[id].type.shape;
  const own = shape.slice(0, shape.length - 2);
  if (own.length !== batch.length || own.some((s, d) => s !== batch[d])) {
    return `${what}: batch axes [${own.join(", ")}] broadcast to [${batch.join(", ")}]`;
  }
  let at = id;
  while (READ_THROUGH.has(g.nodes[at].op)) at = g.nodes[at].inputs[0];
  if (inline[at] === 1) return `${what} is computed on load (${g.nodes[at].op}), which no kernel stores`;
  return undefined;
}

/** `raw`: the target's calls write their raw product (cuBLASLt). */
export function gemmCallsOnGraph(g: Graph, raw: boolean): GraphCalls {
  const inline = inlineNodes(g, true);
  const calls = new Set<NodeId>();
  const refused = new Map<NodeId, string>();
  for (const n of g.nodes) {
    if (n.op !== "matmul") continue;
    const batch = n.type.shape.slice(0, n.type.shape.length - 2);
    const why = operandRefusal(g, inline, n.inputs[0], batch, "A") ??
      operandRefusal(g, inline, n.inputs[1], batch, "B");
    if (why === undefined) calls.add(n.id);
    else refused.set(n.id, why);
  }
  return { calls, raw: raw ? calls : new Set(), refused };
}
