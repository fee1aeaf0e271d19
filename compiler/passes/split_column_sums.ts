/**
 * Column sums in two passes, for a GPU: a reduction over the leading axes (a bias gradient: [tokens, hidden]
 * summed over the tokens) becomes a sum over the rows of each of P parts, a thread per (part, column) so
 * loads coalesce, then a sum of the parts. In one pass few threads walk long columns (an eighth of what
 * keeps an H100 busy at BERT-large). The order of additions changes; lavapipe and the CPU keep one pass.
 * How P is chosen, with figures: DESIGN.md, notes: compiler/passes/split_column_sums.ts.
 */
import { Graph, isElementwise, type NodeId, numel, sameShape } from "../../ir/mod.ts";
import { copyNode, copyOutputs } from "../graph/rebuild.ts";

/** Reductions over fewer leading rows than this stay one pass (a short column is one thread's loop). */
const MIN_ROWS = 1024;
/** Each part sums at least this many rows. */
const MIN_ROWS_PER_PART = 16;

/**
 * The largest power of two at most `parts` dividing `rows` with at least MIN_ROWS_PER_PART rows a part,
 * stopping at the first whose `cols` threads a part reach `fill` threads in all.
 */
export function partsFor(rows: number, parts: number, cols = 1, fill = Infinity): number {
  let p = 1;
  while (
    p * 2 <= parts && p * cols < fill && rows % (p * 2) === 0 && rows / (p * 2) >= MIN_ROWS_PER_PART
  ) p *= 2;
  return p;
}

/**
 * `g` with each large column sum (or max) split into two reductions of at most `parts` parts, as few as
 * launch `fill` threads in the first (see partsFor); `g` itself when none is.
 */
export function splitColumnSums(
  g: Graph,
  parts: number,
  fill = Infinity,
  blockRowsOf?: (rows: number, rowLen: number) => number,
): { graph: Graph; split: number } {
  if (parts <= 1) return { graph: g, split: 0 };
  const plan = new Map<NodeId, { rows: number; p: number; lead: number }>();
  const rowReduced = blockRowsOf ? rowReducedValues(g) : new Map<NodeId, number>();
  for (const n of g.nodes) {
    if (n.op !== "reduce_sum" && n.op !== "reduce_max") continue;
    const axes = n.attrs.axes as number[];
    const shape = g.nodes[n.inputs[0]].type.shape;
    const lead = axes.length;
    // Leading axes only, with something kept after them.
    if (!axes.every((a, i) => a === i) || lead === shape.length) continue;
    const rows = numel(shape.slice(0, lead));
    const cols = numel(shape.slice(lead));
    if (rows < MIN_ROWS || cols < 2) continue;
    const rowLen = sharedRowLen(g, n.inputs[0], rowReduced);
    const block = rowLen && blockRowsOf ? blockRowsOf(rows, rowLen) : 1;
    const p = block >= 2 && rows % block === 0 ? rows / block : partsFor(rows, parts, cols, fill);
    if (p > 1) plan.set(n.id, { rows, p, lead });
  }
  if (plan.size === 0) return { graph: g, split: 0 };
  const out = new Graph(g.name, g.precision);
  const newId: NodeId[] = [];
  for (const n of g.nodes) {
    const ins = n.inputs.map((i) => newId[i]);
    const s = plan.get(n.id);
    if (!s) {
      newId[n.id] = copyNode(out, n, ins);
      continue;
    }
    const rest = g.nodes[n.inputs[0]].type.shape.slice(s.lead);
    const view = out.add("reshape", ins, { shape: [s.p, s.rows / s.p, ...rest] }, undefined, n.loc);
    const perPart = out.add(n.op, [view], { axes: [1] }, undefined, n.loc);
    const whole = out.add(n.op, [perPart], { axes: [0] }, undefined, n.loc);
    newId[n.id] = out.add("reshape", [whole], { shape: [...n.type.shape] }, undefined, n.loc);
  }
  copyOutputs(g, out, newId);
  return { graph: out, split: plan.size };
}

/** The nodes an elementwise chain of the same shape leads from to `x` (x included). */
function elementwiseCone(g: Graph, x: NodeId): NodeId[] {
  const shape = g.nodes[x].type.shape;
  const out: NodeId[] = [];
  const seen = new Set<NodeId>();
  const stack = [x];
  while (stack.length) {
    const id = stack.pop()!;
    if (seen.has(id)) continue;
    seen.add(id);
    out.push(id);
    const n = g.nodes[id];
    if (!isElementwise(n.op)) continue;
    for (const i of n.inputs) if (sameShape(g.nodes[i].type.shape, shape)) stack.push(i);
  }
  return out;
}

/**
 * Every value in the elementwise cone of a reduction over trailing axes, with the reduced length: the
 * values a row kernel reads at its elements.
 */
function rowReducedValues(g: Graph): Map<NodeId, number> {
  const out = new Map<NodeId, number>();
  for (const n of g.nodes) {
    if (n.op !== "reduce_sum" && n.op !== "reduce_max") continue;
    const axes = n.attrs.axes as number[];
    const shape = g.nodes[n.inputs[0]].type.shape;
    const first = shape.length - axes.length;
    if (first === 0 || !axes.every((a, i) => a === first + i)) continue;
    const rowLen = numel(shape.slice(first));
    for (const x of elementwiseCone(g, n.inputs[0])) out.set(x, rowLen);
  }
  return out;
}

/**
 * The row length of a row reduction whose operand shares an elementwise producer with `x` (a value of x's
 * shape: the cone keeps to it), 0 if none.
 */
function sharedRowLen(g: Graph, x: NodeId, rowReduced: ReadonlyMap<NodeId, number>): number {
  for (const y of elementwiseCone(g, x)) {
    const rowLen = rowReduced.get(y);
    if (rowLen !== undefined) return rowLen;
  }
  return 0;
}
