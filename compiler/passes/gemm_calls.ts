/**
 * Which matmuls run as library calls, decided on the graph before fusion (where XLA runs its GEMM rewriter):
 * a matmul whose operands are values some kernel stores, read through views and casts, is a call. A call that
 * writes its raw product (cuBLASLt) is a kernel that computes only what the call's epilogue can: fusion leaves
 * every other op to the kernels reading the product. The library-calls stage derives each call's operands,
 * epilogue and C from stored dtypes and layouts (an epilogue kernel where they do not fit), and a call it
 * cannot derive runs its template kernel, the fallback. The column sums a raw call's BGRAD epilogue may take
 * over are found here too, so that fusion leaves them apart.
 */
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { inlineNodes, usersOf } from "../graph/users.ts";
import { keepsElements } from "./gemm_sum_order.ts";

/** Which matmuls are calls: the others, with why each is not; and what fusion must know of the calls. */
export interface GraphCalls {
  readonly refused: ReadonlyMap<NodeId, string>;
  /**
   * The calls that write their raw product, their kernels computing only RAW_CALL_EPILOGUE's ops; the
   * others' calls run their fused kernel's epilogue in their own pass (the CPU's sgemm blocks), so fusion
   * joins their consumers as the template's.
   */
  readonly raw: ReadonlySet<NodeId>;
  /**
   * Column sums a raw call's BGRAD epilogue may compute instead (`bgradSums`), each with the tensors of the
   * call's operand chain it sums: fusion keeps the sum out of their kernels, and the library-calls stage
   * decides which sums a call takes.
   */
  readonly bgradSums: ReadonlyMap<NodeId, ReadonlySet<NodeId>>;
}

/**
 * What a raw call's kernel may compute besides its product, as cuBLASLt does in the call: D written through
 * views and a cast, a bias added (BIAS epilogue), a stored sum added as C (beta 1).
 */
export const RAW_CALL_EPILOGUE: ReadonlySet<string> = new Set(
  "cast reshape permute broadcast add".split(" "),
);

/**
 * What a call reads its operands through: strided views of a buffer, or a load that converts (the
 * derivation, lower/gemm_library.ts, follows the same ops to the strides).
 */
export const READ_THROUGH: ReadonlySet<string> = new Set(["cast", "reshape", "permute", "slice"]);

/**
 * Why operand `id` of a matmul cannot be a library call's, or undefined when it can (its batch axes are the
 * product's: ir/ops.ts requires it).
 */
function operandRefusal(g: Graph, inline: Uint8Array, id: NodeId, what: string) {
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
    const why = operandRefusal(g, inline, n.inputs[0], "A") ?? operandRefusal(g, inline, n.inputs[1], "B");
    if (why === undefined) calls.add(n.id);
    else refused.set(n.id, why);
  }
  const rawCalls = raw ? calls : new Set<NodeId>();
  return { refused, raw: rawCalls, bgradSums: bgradSums(g, rawCalls) };
}

/**
 * The column sums over the rows a raw call contracts: db = Σ_tokens dY of an operand read as [k, cols] (A
 * transposed, or B as stored), or of what that operand is a view or cast of, read through reshapes and
 * widening casts. Each is a whole sum or the first pass of one over parts of the rows (passes/column_sums.ts).
 */
function bgradSums(g: Graph, raw: ReadonlySet<NodeId>): Map<NodeId, Set<NodeId>> {
  const users = usersOf(g);
  const sums = new Map<NodeId, Set<NodeId>>();
  const from = (x: NodeId, at: NodeId, rows: number, cols: number) => {
    for (const u of users[at]) {
      if (keepsElements(g, u)) from(x, u, rows, cols);
      else if (blocksOf(g, u, rows, cols) !== undefined) sums.set(u, (sums.get(u) ?? new Set()).add(x));
    }
  };
  for (const mm of raw) {
    const n = g.nodes[mm];
    if (n.type.shape.length !== 2) continue;
    n.inputs.forEach((o, pos) => {
      const cols = g.nodes[o].type.shape[1];
      if ((pos === 0 ? n.attrs.transpose_a !== true : n.attrs.transpose_b === true) || cols < 2) return;
      for (let x = o;; x = g.nodes[x].inputs[0]) {
        if (numel(g.nodes[x].type.shape) % cols === 0) from(x, x, numel(g.nodes[x].type.shape) / cols, cols);
        if (!READ_THROUGH.has(g.nodes[x].op)) break;
      }
    });
  }
  return sums;
}

/**
 * How many blocks of rows node `u` leaves unsummed when its input sums `q` blocks of a [rows, cols] tensor
 * (a reshape or a widening cast keeps q; a sum over a run of axes with the cols trailing leaves the blocks
 * before them); undefined if it is no such sum (lower/gemm_bgrad.ts follows the whole chain with it).
 */
export function blocksOf(g: Graph, u: NodeId, q: number, cols: number): number | undefined {
  const n = g.nodes[u];
  if (n.op === "reshape") return q;
  if (n.op === "cast") return n.attrs.to === "f32" ? q : undefined;
  if (n.op !== "reduce_sum" || n.type.dtype !== "f32") return undefined;
  const shape = g.nodes[n.inputs[0]].type.shape;
  const axes = [...(n.attrs.axes as number[])].sort((p, r) => p - r);
  if (axes.length === 0 || axes.some((a, i) => a !== axes[0] + i)) return undefined;
  const lead = numel(shape.slice(0, axes[0])), run = numel(shape.slice(axes[0], axes[axes.length - 1] + 1));
  if (numel(shape.slice(axes[axes.length - 1] + 1)) !== cols || lead * run !== q) return undefined;
  return lead;
}
