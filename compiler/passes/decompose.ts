/**
 * The `decompose` pass: each composite op (ir/ops.ts, category "composite") becomes the primitives it stands
 * for, in place, so every later stage sees only primitives. `attention` emits the nodes dsl/nn.ts's softmax
 * and dropout emit, in their order (tests/cpu/decompose.test.ts compares the two graphs), and
 * `attention_grad` is autodiff's VJP of those primitives, reading the forward's nodes: a graph whose
 * attention went through the op decomposes to the very graph its primitives and autodiff would have built.
 */
import { Graph, isComposite, type Node, type NodeId, sameShape, type TensorType } from "../../ir/mod.ts";
import type { Attrs } from "../../ir/ops.ts";
import { GraphEditor } from "../graph/edit.ts";
import { backprop } from "../training_graph/autodiff.ts";
import { addWithPrecision, type Precision } from "../training_graph/mixed_precision.ts";
import { copyOutputs } from "../graph/rebuild.ts";
import type { Pass } from "../pipeline/stage_runner.ts";

/** dropout(softmax(q·kᵀ·scale + mask))·v, node for node as the DSL's primitives build it. */
function attentionPrimitives(
  g: Graph,
  loc: string | undefined,
  ops: readonly NodeId[],
  attrs: Attrs,
): NodeId {
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
  const scores = withNumber(
    "mul",
    add("matmul", [q, k], { transpose_a: false, transpose_b: true }),
    attrs.scale as number,
  );
  const shape = type(scores).shape, axes = [shape.length - 1];
  const z = add("add", [scores, broadcast(mask, shape)]);
  const shifted = add("sub", [z, broadcast(add("stop_gradient", [add("reduce_max", [z], { axes })]), shape)]);
  const e = add("exp", [shifted]);
  let probs = add("div", [e, broadcast(add("reduce_sum", [e], { axes }), shape)]);
  if (p > 0) {
    const u = add("random_uniform", [ops[ops.length - 1]], { stream: attrs.stream }, {
      dtype: "f32",
      shape: [...shape],
    });
    const keep = withNumber("ge", u, p);
    probs = add("where", [keep, withNumber("mul", probs, 1 / (1 - p)), full(0, type(probs))]);
  }
  return add("matmul", [probs, v], { transpose_a: false, transpose_b: false });
}

/**
 * What one decomposition emitted, by the node's operands and attributes: an attention's forward primitives
 * (in emission order), and each gradient's whole scratch-to-graph map. attention_grad reuses the forward it
 * would recompute, and the gradients of one attention share one backward sweep, so the decomposed graph
 * holds each value once, as autodiff over the primitives builds it.
 */
type Emitted = Map<string, NodeId[]>;
const PRECISION_OF: Record<string, Precision> = { f32: "fp32", f16: "fp16", bf16: "bf16" };

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
  const done = grad ? emitted.get(gradKey) : undefined;
  const scratch = new Graph("decompose");
  const holes = n.inputs.map((_, i) => scratch.add("input", [], { name: `${i}` }, out.nodes[ins[i]].type));
  const first = holes.length;
  let result = attentionPrimitives(scratch, n.loc, forwardOf(holes), n.attrs);
  const forward = emitted.get(fwdKey), fwdEnd = scratch.nodes.length;
  if (grad) {
    const roots = (wanted as number[]).map((i) => holes[i]);
    result = backprop(new GraphEditor(scratch), result, () => holes[4], roots)[holes[wrt as number]];
  }
  if (done) return done[result];
  const map = [...ins];
  for (let i = first; i < scratch.nodes.length; i++) {
    const reused = i < fwdEnd ? forward?.[i - first] : undefined;
    map[i] = reused ??
      addWithPrecision(out, scratch.nodes[i], scratch.nodes[i].inputs.map((x) => map[x]), precision);
  }
  if (!forward) emitted.set(fwdKey, map.slice(first, fwdEnd));
  if (grad) emitted.set(gradKey, map);
  return map[result];
}

/** g with its composite ops decomposed; g itself when it has none. */
export function decomposeComposites(g: Graph): Graph {
  if (!g.nodes.some((n) => isComposite(n.op))) return g;
  const out = new Graph(g.name, g.precision);
  const map: NodeId[] = [], emitted: Emitted = new Map();
  for (const n of g.nodes) {
    const ins = n.inputs.map((i) => map[i]);
    map[n.id] = isComposite(n.op) ? expand(out, n, ins, emitted) : out.add(n.op, ins, n.attrs, n.type, n.loc);
  }
  copyOutputs(g, out, map);
  return out;
}

export const decompose: Pass = { name: "decompose", run: (g) => decomposeComposites(g) };
