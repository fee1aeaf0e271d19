/**
 * Reverse-mode autodiff: appends to a copy of the forward graph the backward nodes that compute the gradient
 * of a scalar loss with respect to parameters, using the per-op rules of vjp.ts. Only nodes on a path from a
 * wanted parameter to the loss get a cotangent: a forward sweep marks the nodes that depend differentiably on
 * a wanted parameter, a backward sweep marks the loss's ancestors, and the backward pass visits their
 * intersection once, in reverse id order. Everything is arrays indexed by node id, so the pass is linear in
 * the size of the graph.
 */
import { Graph, IRError, isFloat, type NodeId, numel } from "../../ir/mod.ts";
import { GraphEditor } from "../graph/edit.ts";
import { VJP } from "./vjp.ts";

/** Prefix of the outputs that hold gradients: `grad.<param name>`. */
export const GRAD_PREFIX = "grad.";

/**
 * Returns a new graph holding g's nodes (same ids), then the backward nodes; it keeps g's outputs and
 * adds `grad.<name>` for each parameter in `wrt` (default: every param, in graph order). A parameter
 * the loss does not depend on gets a zero constant gradient.
 */
export function differentiate(g: Graph, loss: string, wrt?: readonly string[]): Graph {
  const lossId = g.outputs.get(loss);
  if (lossId === undefined) {
    throw new IRError(
      `autodiff: '${g.name}' has no output '${loss}' (outputs: ${[...g.outputs.keys()].join(", ")})`,
    );
  }
  const lossType = g.nodes[lossId].type;
  if (!isFloat(lossType.dtype) || numel(lossType.shape) !== 1) {
    throw new IRError(
      `autodiff: loss '${loss}' must be a float scalar, got ${lossType.dtype}[${lossType.shape.join(",")}]`,
    );
  }
  const params = g.sources("param");
  const names = wrt ?? [...params.keys()];
  const roots = names.map((name) => {
    const p = params.get(name);
    if (!p) throw new IRError(`autodiff: '${g.name}' has no param '${name}'`);
    if (g.outputs.has(GRAD_PREFIX + name)) {
      throw new IRError(`autodiff: '${g.name}' already has an output '${GRAD_PREFIX + name}'`);
    }
    return p.id;
  });

  const out = new Graph(g.name, g.precision);
  for (const n of g.nodes) out.nodes.push(n); // nodes are immutable, so sharing them is a copy
  for (const [name, id] of g.outputs) out.outputs.set(name, id);
  const b = new GraphEditor(out);
  const ct = backprop(b, lossId, () => b.constLike(1, lossType), roots);

  names.forEach((name, k) => {
    const p = roots[k];
    out.setOutput(GRAD_PREFIX + name, ct[p] >= 0 ? ct[p] : b.constLike(0, g.nodes[p].type));
  });
  return out;
}

/**
 * The backward sweep: from `loss` (its cotangent made by `seed`) down to the first node, the VJP rules of
 * the nodes on a path from `roots` to `loss`, appended to b's graph. Returns each node's cotangent id, or -1.
 * compiler/passes/decompose.ts runs it over one attention's primitives.
 */
export function backprop(
  b: GraphEditor,
  loss: NodeId,
  seed: () => NodeId,
  roots: readonly NodeId[],
): Int32Array {
  const g = b.graph, onPath = pathToLoss(g, roots, loss);
  // ct[i]: the id of the cotangent of forward node i accumulated so far, or -1.
  const ct = new Int32Array(loss + 1).fill(-1);
  if (onPath[loss]) ct[loss] = seed();
  for (let i = loss; i >= 0; i--) {
    const gi = ct[i];
    if (gi < 0) continue;
    const n = g.nodes[i];
    const rule = VJP[n.op];
    if (!rule) continue; // sources and ops that pass no gradient
    const want = n.inputs.map((x) => onPath[x] === 1);
    b.loc = n.loc;
    let cts: (NodeId | undefined)[];
    try {
      cts = rule(b, n, gi, want);
    } catch (e) {
      // A rule that builds an ill-typed node is a bug in vjp.ts; name the forward node it was expanding.
      if (e instanceof IRError) {
        throw new IRError(`autodiff: VJP of %${i} (${n.op}${n.loc ? ` at ${n.loc}` : ""}): ${e.message}`);
      }
      throw e;
    }
    for (let k = 0; k < n.inputs.length; k++) {
      const d = cts[k];
      if (!want[k] || d === undefined) continue;
      const x = n.inputs[k];
      // Fan-out: a node used several times gets the sum of its consumers' contributions.
      ct[x] = ct[x] < 0 ? d : b.add(ct[x], d);
    }
  }
  b.loc = undefined;
  return ct;
}

/**
 * 1 for the nodes whose cotangent the backward pass needs: those that depend differentiably on a root
 * (float results through ops with a VJP rule) and that the loss depends on.
 */
function pathToLoss(g: Graph, roots: readonly NodeId[], lossId: NodeId): Uint8Array {
  const n = g.nodes.length;
  const fromRoot = new Uint8Array(n);
  for (const r of roots) fromRoot[r] = 1;
  for (let i = 0; i <= lossId; i++) {
    const node = g.nodes[i];
    if (fromRoot[i] || VJP[node.op] === null || !isFloat(node.type.dtype)) continue;
    for (const x of node.inputs) {
      if (fromRoot[x]) {
        fromRoot[i] = 1;
        break;
      }
    }
  }
  const onPath = new Uint8Array(n);
  if (fromRoot[lossId]) onPath[lossId] = 1;
  for (let i = lossId; i >= 0; i--) {
    if (!onPath[i]) continue;
    for (const x of g.nodes[i].inputs) if (fromRoot[x]) onPath[x] = 1;
  }
  return onPath;
}
