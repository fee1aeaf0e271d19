/**
 * The `decompose` pass: each composite op (ir/ops.ts, category "composite") becomes the primitives it stands
 * for, in place, so every later stage sees only primitives. `attention` emits the nodes dsl/nn.ts's softmax
 * and dropout emit, in their order (tests/cpu/decompose.test.ts compares the two graphs), and
 * `attention_grad` is autodiff's VJP of those primitives, reading the forward's nodes: a graph whose
 * attention went through the op decomposes to the very graph its primitives and autodiff would have built.
 * Each attention leaves a node group (ir/graph.ts) naming its nodes, which the attention fusion and the
 * flash-attention stage read instead of matching the primitives.
 */
import { Graph, isComposite, type Node, type NodeId, sameShape, type TensorType } from "../../ir/mod.ts";
import type { Attrs } from "../../ir/ops.ts";
import { GraphEditor } from "../graph/edit.ts";
import { backprop } from "../training_graph/autodiff.ts";
import { addWithPrecision, type Precision } from "../training_graph/mixed_precision.ts";
import { copyOutputs } from "../graph/rebuild.ts";
import type { Pass } from "../pipeline/stage_runner.ts";

/**
 * dropout(softmax(q·kᵀ·scale + mask))·v, node for node as the DSL's primitives build it; the nodes later
 * stages are told of by role (the two GEMMs, the masked scores, the row statistics, the probabilities).
 */
function attentionPrimitives(
  g: Graph,
  loc: string | undefined,
  ops: readonly NodeId[],
  attrs: Attrs,
): Record<string, NodeId> {
  const add = (op: string, ins: NodeId[], a: Attrs = {}, declared?: TensorType) =>
    g.add(op, ins, a, declared, loc);
  const type = (x: NodeId) => g.nodes[x].type;
  // A Tensor method given a number: a constant of the operand's type, then the op.
  const full = (k: number, t: TensorType) =>
    add("const", [], { value: k }, { dtype: t.dtype, shape: [...t.shape] });
  const withNumber = (op: string, x: NodeId, k: number) => add(op, [x, full(k, type(x))]);
  const broadcast = (x: NodeId, shape: readonly number[]) =>
    sameShape(type(x).shape, shape) ? x : add("broadcast", [x], { shape: [...shape] });
  const [q, k, v, mask] = ops, p = attrs.dropout as number;
  const qk = add("matmul", [q, k], { transpose_a: false, transpose_b: true });
  const scores = withNumber("mul", qk, attrs.scale as number);
  const shape = type(scores).shape, axes = [shape.length - 1];
  const z = add("add", [scores, broadcast(mask, shape)]);
  const rmax = add("reduce_max", [z], { axes });
  const e = add("exp", [add("sub", [z, broadcast(add("stop_gradient", [rmax]), shape)])]);
  const rsum = add("reduce_sum", [e], { axes });
  let probs = add("div", [e, broadcast(rsum, shape)]);
  if (p > 0) {
    const u = add("random_uniform", [ops[ops.length - 1]], { stream: attrs.stream }, {
      dtype: "f32",
      shape: [...shape],
    });
    const keep = withNumber("ge", u, p);
    probs = add("where", [keep, withNumber("mul", probs, 1 / (1 - p)), full(0, type(probs))]);
  }
  return {
    qk,
    z,
    rmax,
    rsum,
    probs,
    pv: add("matmul", [probs, v], { transpose_a: false, transpose_b: false }),
  };
}

/**
 * One attention's decomposition, found by its forward operands and attributes: the forward's nodes (in
 * emission order) and its node group, which the gradients join (roles dq, dk, dv). attention_grad reuses
 * the forward it would recompute, and the gradients of one attention share one backward sweep, so the
 * decomposed graph holds each value once, as autodiff over the primitives builds it.
 */
interface Site {
  readonly forward: NodeId[];
  readonly roles: Record<string, NodeId>;
  readonly nodes: NodeId[];
}
/** The sites, and each backward sweep's gradients by operand index. */
type Emitted = { sites: Map<string, Site>; grads: Map<string, NodeId[]> };
const PRECISION_OF: Record<string, Precision> = { f32: "fp32", f16: "fp16", bf16: "bf16" };
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

/**
 * Appends `n`'s primitives to `out`, reading `ins`: they are built in an f32 scratch graph over placeholders,
 * then copied with the op's mixed precision (the casts applyPrecision gives every f32 matmul).
 */
function expand(out: Graph, n: Node, ins: readonly NodeId[], emitted: Emitted): NodeId {
  const grad = n.op === "attention_grad", { wrt, wanted, ...fwdAttrs } = n.attrs;
  // The op's own precision (applyPrecision sets `low`), not the graph's: a fuzz batch unites fp32 and fp16 parts.
  const precision = PRECISION_OF[(n.attrs.low as string) ?? "f32"];
  // The forward's operands: a gradient's without its dO (operand 4).
  const forwardOf = <T>(xs: readonly T[]) => xs.filter((_, i) => !grad || i !== 4);
  const fwdKey = `${forwardOf(ins)}|${JSON.stringify(fwdAttrs)}`, gradKey = `${fwdKey}|${ins[4]}|${wanted}`;
  const done = grad ? emitted.grads.get(gradKey) : undefined;
  if (done) return done[wrt as number];
  const scratch = new Graph("decompose");
  const holes = n.inputs.map((_, i) => scratch.add("input", [], { name: `${i}` }, out.nodes[ins[i]].type));
  const first = holes.length;
  const roles = attentionPrimitives(scratch, n.loc, forwardOf(holes), n.attrs);
  const fwdEnd = scratch.nodes.length, map = [...ins];
  const copy = (from: number, to: number) => {
    for (let i = from; i < to; i++) {
      map[i] = addWithPrecision(out, scratch.nodes[i], scratch.nodes[i].inputs.map((x) => map[x]), precision);
    }
  };
  let site = emitted.sites.get(fwdKey);
  if (site) site.forward.forEach((id, i) => (map[first + i] = id));
  else {
    const start = out.nodes.length;
    copy(first, fwdEnd);
    // A role is the node of the role's op: a mixed-precision GEMM's f16 product, not its cast to f32.
    const roleNode = (id: NodeId) => {
      let x = map[id];
      while (out.nodes[x].op !== scratch.nodes[id].op) x = out.nodes[x].inputs[0];
      return x;
    };
    const named = Object.fromEntries(Object.entries(roles).map(([r, id]) => [r, roleNode(id)]));
    site = { forward: map.slice(first, fwdEnd), roles: named, nodes: range(start, out.nodes.length) };
    emitted.sites.set(fwdKey, site);
    out.groups.push({ kind: "attention", roles: site.roles, nodes: site.nodes, attrs: fwdAttrs });
  }
  if (!grad) return map[roles.pv];
  const roots = (wanted as number[]).map((i) => holes[i]);
  const dx = backprop(new GraphEditor(scratch), roles.pv, () => holes[4], roots);
  const start = out.nodes.length;
  copy(fwdEnd, scratch.nodes.length);
  site.nodes.push(...range(start, out.nodes.length));
  const results: NodeId[] = [];
  for (const i of wanted as number[]) site.roles[`d${"qkv"[i]}`] = results[i] = map[dx[holes[i]]];
  emitted.grads.set(gradKey, results);
  return results[wrt as number];
}

/** g with its composite ops decomposed; g itself when it has none. */
export function decomposeComposites(g: Graph): Graph {
  if (!g.nodes.some((n) => isComposite(n.op))) return g;
  const out = new Graph(g.name, g.precision);
  const map: NodeId[] = [], emitted: Emitted = { sites: new Map(), grads: new Map() };
  for (const n of g.nodes) {
    const ins = n.inputs.map((i) => map[i]);
    map[n.id] = isComposite(n.op) ? expand(out, n, ins, emitted) : out.add(n.op, ins, n.attrs, n.type, n.loc);
  }
  copyOutputs(g, out, map);
  return out;
}

export const decompose: Pass = { name: "decompose", run: (g) => decomposeComposites(g) };
