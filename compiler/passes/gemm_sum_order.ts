/**
 * GEMM products summed first (CUDA plans with library GEMMs, the gemm-calls stage): a tree of adds
 * whose leaves include two or more GEMM products (each read only there, through reshapes and casts to f32)
 * is rebuilt as (the other leaves, in their order) + ((p1 + p2) + p3 …), the products in graph order.
 * compiler/fusion/sums_into_gemms.ts then makes each partial sum of products the next GEMM's C (beta 1).
 * Why, on BERT's attention backward: DESIGN.md, notes: compiler/passes/gemm_sum_order.ts.
 */
import { Graph, type NodeId } from "../../ir/mod.ts";
import { copyNode, copyOutputs } from "../graph/rebuild.ts";
import { usersOf } from "../graph/users.ts";

/**
 * Reshapes and casts to f32 keep a tensor's elements, in order, and their values: a product on the way to
 * its add here, the summed tensor of a column sum in fusion/library_sums.ts, C in lower/gemm_library.ts.
 */
export const keepsElements = (g: Graph, id: NodeId) => {
  const n = g.nodes[id];
  return n.op === "reshape" || (n.op === "cast" && n.attrs.to === "f32");
};

/** The trees rebuilt: the root add's id and its leaves, products last (in summation order). */
interface Tree {
  readonly inner: readonly NodeId[];
  readonly others: readonly NodeId[];
  readonly products: readonly NodeId[];
}

export function productsSummedFirst(g: Graph): { graph: Graph; trees: number } {
  const users = usersOf(g);
  const outputs = new Set(g.outputs.values());
  const single = (id: NodeId) => users[id].length === 1 && !outputs.has(id);
  // The GEMM a leaf is (through views and widening casts, each read once), or undefined.
  const productOf = (leaf: NodeId): NodeId | undefined => {
    let at = leaf;
    while (keepsElements(g, at) && single(at)) at = g.nodes[at].inputs[0];
    return g.nodes[at].op === "matmul" && single(at) ? at : undefined;
  };
  // An inner add of a tree: read once, by an add.
  const inner = (id: NodeId) => g.nodes[id].op === "add" && single(id) && g.nodes[users[id][0]].op === "add";
  const trees = new Map<NodeId, Tree>();
  const skip = new Set<NodeId>();
  for (const n of g.nodes) {
    if (n.op !== "add" || inner(n.id)) continue;
    const ins: NodeId[] = [], leaves: NodeId[] = [];
    const walk = (id: NodeId) => {
      if (id !== n.id && !inner(id)) return void leaves.push(id);
      if (id !== n.id) ins.push(id);
      for (const x of g.nodes[id].inputs) walk(x);
    };
    walk(n.id);
    const products = leaves.filter((l) => productOf(l) !== undefined);
    const types = new Set(products.map((l) => g.nodes[productOf(l)!].type.dtype));
    if (products.length < 2 || types.size !== 1 || new Set(leaves).size !== leaves.length) continue;
    products.sort((a, b) => productOf(a)! - productOf(b)!);
    trees.set(n.id, { inner: ins, others: leaves.filter((l) => !products.includes(l)), products });
    for (const x of ins) skip.add(x);
  }
  if (trees.size === 0) return { graph: g, trees: 0 };
  const out = new Graph(g.name, g.precision);
  const newId: NodeId[] = [];
  for (const n of g.nodes) {
    if (skip.has(n.id)) continue;
    const t = trees.get(n.id);
    if (!t) {
      newId[n.id] = copyNode(out, n, n.inputs.map((i) => newId[i]));
      continue;
    }
    const sum = (xs: readonly NodeId[]) =>
      xs.map((x) => newId[x]).reduce((acc, x) => out.add("add", [acc, x], {}, undefined, n.loc));
    const products = sum(t.products);
    newId[n.id] = t.others.length === 0
      ? products
      : out.add("add", [sum(t.others), products], {}, undefined, n.loc);
  }
  copyOutputs(g, out, newId);
  return { graph: out, trees: trees.size };
}
