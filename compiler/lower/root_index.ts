/**
 * Where a kernel stores a root, given the position of the element it computes. A matmul or attention
 * kernel computes its product element by element and stores each root at the same element: a root that is
 * the product reshaped is at the same linear index, and one laid out for its readers (fusion/permuted_storage.ts:
 * attention's heads stored heads-major, its results token-major) is a reshape and permute of such a root,
 * so its index follows from the product's through those views. Storing there keeps the value the
 * value builder computes (it walks the same views back to the product at the position being computed).
 */
import { type Graph, type NodeId, sameShape } from "../../ir/mod.ts";
import type { KExpr } from "../kernel_ir/ir.ts";
import { delinearize, type Idx, linearize } from "./index_math.ts";

const VIEW_OPS = new Set(["permute", "reshape", "cast"]);

/**
 * The reshapes, permutes and casts (which keep the index) `root` is read through from the first node
 * below them that is none of these.
 */
export function viewChain(g: Graph, root: NodeId): { base: NodeId; chain: NodeId[] } {
  const chain: NodeId[] = [];
  let cur = root;
  while (VIEW_OPS.has(g.nodes[cur].op)) {
    chain.push(cur);
    cur = g.nodes[cur].inputs[0];
  }
  return { base: cur, chain: chain.reverse() };
}

/**
 * The index of `root` at the product's element with linear index `lin` (and, when known, per-axis
 * indices `dims` over `shape`, the product's shape).
 */
export function rootIndex(
  g: Graph,
  root: NodeId,
  at: { readonly lin: KExpr; readonly shape: readonly number[]; readonly dims?: readonly KExpr[] },
): Idx {
  const indexOf = (id: NodeId): Idx =>
    at.dims && sameShape(g.nodes[id].type.shape, at.shape)
      ? { dims: at.dims, lin: at.lin }
      : delinearize(at.lin, g.nodes[id].type.shape);
  const { base, chain } = viewChain(g, root);
  if (!chain.some((c) => g.nodes[c].op === "permute")) return indexOf(root);
  let idx = indexOf(base);
  for (const c of chain) {
    const n = g.nodes[c];
    if (n.op === "permute") {
      // Result axis d is operand axis perm[d].
      const perm = n.attrs.perm as number[];
      idx = { dims: perm.map((p) => idx.dims[p]) };
    } else if (n.op === "reshape") {
      idx = delinearize(linearize(idx, g.nodes[n.inputs[0]].type.shape), n.type.shape);
    }
  }
  return idx;
}
