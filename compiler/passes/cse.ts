/**
 * The `cse` pass: common-subexpression elimination. Two nodes with the same op, operands, attributes and
 * type compute the same values, so later ones are replaced by the first (keeping its source location).
 *
 * Every op in the IR is a pure function of its operands and attributes, `random_uniform` included: its
 * values are fixed by the key operand and the `stream` attribute (counter-based Philox), so two draws with
 * the same key and stream are the same draw. `input` and `param` nodes are told apart by their names.
 */
import { Graph, type Node, type NodeId, type OpName, typeToString } from "../../ir/mod.ts";
import { formatNumber } from "../../ir/print.ts";
import { copyNode, copyOutputs } from "../graph/rebuild.ts";
import type { Pass, PassContext } from "../pipeline/stage_runner.ts";

// Operand order does not matter for these in the reference semantics (IEEE + and * commute). Not max and
// min: the reference's max(+0, -0) is +0 but max(-0, +0) is -0.
const COMMUTATIVE: ReadonlySet<OpName> = new Set<OpName>(["add", "mul", "and", "or", "eq", "ne"]);

function attrKey(n: Node): string {
  const keys = Object.keys(n.attrs).sort();
  return keys.map((k) => {
    const v = n.attrs[k];
    const s = typeof v === "number"
      ? formatNumber(v) // distinguishes -0 from 0 and keeps NaN, which JSON would not
      : Array.isArray(v)
      ? v.join(",")
      : JSON.stringify(v);
    return `${k}=${s}`;
  }).join(";");
}

/** The identity of the value a node computes, given its operands' new ids. */
function keyOf(n: Node, inputs: readonly NodeId[]): string {
  const ins = COMMUTATIVE.has(n.op) ? [...inputs].sort((a, b) => a - b) : inputs;
  return `${n.op}(${ins.join(",")}){${attrKey(n)}}:${typeToString(n.type)}`;
}

export interface CseResult {
  readonly graph: Graph;
  /** Nodes replaced by an earlier equal one. */
  readonly merged: number;
}

export function cseGraph(g: Graph): CseResult {
  const out = new Graph(g.name, g.precision);
  const seen = new Map<string, NodeId>();
  const map = new Int32Array(g.nodes.length);
  let merged = 0;
  for (const n of g.nodes) {
    const inputs = n.inputs.map((i) => map[i]);
    const key = keyOf(n, inputs);
    const prev = seen.get(key);
    if (prev !== undefined) {
      map[n.id] = prev;
      merged++;
      continue;
    }
    map[n.id] = copyNode(out, n, inputs);
    seen.set(key, map[n.id]);
  }
  if (merged === 0) return { graph: g, merged };
  copyOutputs(g, out, map);
  return { graph: out, merged };
}

export const cse: Pass = {
  name: "cse",
  run(g: Graph, ctx: PassContext): Graph {
    const { graph, merged } = cseGraph(g);
    ctx.log(3, `[cse] merged ${merged} nodes`);
    return graph;
  },
};
