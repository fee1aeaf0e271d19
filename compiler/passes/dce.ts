/**
 * The `dce` pass: dead-code elimination. Removes the nodes no graph output depends on. Every `input` and
 * `param` node stays, used or not: they are the graph's interface (feeds, checkpoints and the optimizer
 * look them up by name), and dropping one would change what a caller must supply.
 */
import { Graph } from "../../ir/mod.ts";
import { copyNode, copyOutputs } from "../graph/rebuild.ts";
import type { Pass, PassContext } from "../pipeline/stage_runner.ts";

export interface DceResult {
  readonly graph: Graph;
  readonly removed: number;
}

export function dceGraph(g: Graph): DceResult {
  const live = new Uint8Array(g.nodes.length);
  for (const id of g.outputs.values()) live[id] = 1;
  for (const n of g.nodes) if (n.op === "input" || n.op === "param") live[n.id] = 1;
  // Operands come before their users, so one backward walk marks every ancestor of a live node.
  for (let i = g.nodes.length - 1; i >= 0; i--) {
    if (live[i]) { for (const x of g.nodes[i].inputs) live[x] = 1; }
  }
  const removed = g.nodes.length - live.reduce((a, b) => a + b, 0);
  if (removed === 0) return { graph: g, removed };
  const out = new Graph(g.name, g.precision);
  const map = new Int32Array(g.nodes.length).fill(-1);
  for (const n of g.nodes) {
    if (live[n.id]) map[n.id] = copyNode(out, n, n.inputs.map((i) => map[i]));
  }
  copyOutputs(g, out, map);
  return { graph: out, removed };
}

export const dce: Pass = {
  name: "dce",
  run(g: Graph, ctx: PassContext): Graph {
    const { graph, removed } = dceGraph(g);
    ctx.log(3, `[dce] removed ${removed} nodes`);
    return graph;
  },
};
