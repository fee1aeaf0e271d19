/**
 * Column sums a library GEMM will compute: on plans whose GEMMs are cuBLASLt calls, the bias gradient
 * db = Σ_tokens dY of a linear layer is taken over by the dW GEMM's BGRAD epilogue
 * (compiler/lower/gemm_bgrad.ts), which sums the dY operand it reads anyway. The column-sum kernels then
 * stay in the plan only as the call's fallback, and producer fusion leaves them out of dY's kernel so that
 * dY roots a kernel of its own (why, and the test: DESIGN.md, notes: compiler/fusion/library_sums.ts).
 */
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { keepsElements as passesThrough } from "../passes/gemm_sum_order.ts";
import type { FusedKernel } from "./types.ts";

/** Whether a call of `calls` reads `x` (through reshapes and casts) as the operand whose rows it sums over. */
function contractsRowsOf(
  g: Graph,
  users: readonly NodeId[][],
  x: NodeId,
  cols: number,
  calls: ReadonlySet<NodeId>,
): boolean {
  const seen = new Set<NodeId>();
  const walk = (id: NodeId): boolean => {
    if (seen.has(id)) return false;
    seen.add(id);
    for (const u of users[id]) {
      const n = g.nodes[u];
      if ((n.op === "reshape" || n.op === "cast") && walk(u)) return true;
      if (!calls.has(u)) continue;
      const shape = g.nodes[id].type.shape;
      if (shape.length !== 2 || shape[1] !== cols) continue;
      if (n.inputs[0] === id && n.attrs.transpose_a === true) return true;
      if (n.inputs[1] === id && n.attrs.transpose_b !== true) return true;
    }
    return false;
  };
  return walk(x);
}

/**
 * Whether kernel `k` computes nothing but a column sum of `x` (a sum over x's leading rows, or a first pass
 * of one over parts of those rows) that a library call of `calls` reading `x` will compute as its BGRAD
 * epilogue.
 */
export function isLibraryColumnSum(
  g: Graph,
  users: readonly NodeId[][],
  x: NodeId,
  k: FusedKernel,
  calls: ReadonlySet<NodeId>,
): boolean {
  if (k.kind !== "reduce" || !k.axes || k.axes.length === 0) return false;
  const root = g.nodes[k.roots[0]];
  if (k.roots.length !== 1 || root.op !== "reduce_sum" || root.type.dtype !== "f32") return false;
  // Every member but the sum is a reshape or cast on the way from x (views between may be outside it).
  for (const m of k.members) if (m !== root.id && !passesThrough(g, m)) return false;
  let at = root.inputs[0];
  while (at !== x && passesThrough(g, at)) at = g.nodes[at].inputs[0];
  if (at !== x) return false;
  // The sum runs over a contiguous run of leading-or-middle axes with the columns trailing.
  const space = k.space;
  const axes = [...k.axes].sort((p, q) => p - q);
  if (axes.some((a, i) => a !== axes[0] + i)) return false;
  const cols = numel(space.slice(axes[axes.length - 1] + 1));
  if (cols < 2 || numel(g.nodes[x].type.shape) % cols !== 0) return false;
  return contractsRowsOf(g, users, x, cols, calls);
}
