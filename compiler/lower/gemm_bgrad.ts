/**
 * Bias gradients as cuBLASLt epilogues (issue 16 item 1): the dW GEMM's BGRADA/BGRADB epilogue computes the
 * bias gradient db = Σ_tokens dY, a column sum of the operand it reads anyway, so the column-sum kernels
 * leave the step. Recognized on the graph by how many row blocks of X each node sums; the kernels stay in
 * the plan as the call's fallback, and only CUDA plans whose step order lets either path write the vector
 * take it (DESIGN.md, notes: compiler/lower/gemm_bgrad.ts).
 */
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import type { FusionResult } from "../fusion/types.ts";
import type { Kernel } from "../kernel_ir/ir.ts";
import { biasTypeFits, type GemmDType } from "./gemm_library.ts";
import type { PlanGemm } from "../../plan/plan.ts";

/** What bgradEpilogues needs of the kernel state. */
export interface BgradContext {
  readonly graph: Graph;
  readonly fusion: FusionResult;
  /** Lowered kernels, aligned with fusion.kernels (names and buffer bindings). */
  readonly kernels: readonly Kernel[];
  readonly bufferOfNode: ReadonlyMap<NodeId, number>;
  /** Stored dtype per buffer id. */
  readonly bufferDtype: (buffer: number) => string;
}

/** A GEMM call given a bias-gradient epilogue, and the column-sum kernels it covers. */
export interface BgradChoice {
  readonly call: PlanGemm;
  readonly covers: readonly number[];
}

/**
 * For each library GEMM (kernel index -> call) that can take over a column sum, its call with the
 * bias-gradient epilogue and the kernels it covers. Each column sum goes to one call at most.
 */
export function bgradEpilogues(
  c: BgradContext,
  calls: ReadonlyMap<number, PlanGemm>,
): Map<number, BgradChoice> {
  const g = c.graph;
  const consumers: NodeId[][] = g.nodes.map(() => []);
  for (const n of g.nodes) for (const i of new Set(n.inputs)) consumers[i].push(n.id);
  const outputs = new Set(g.outputs.values());
  const nodesOfBuffer = new Map<number, NodeId[]>();
  for (const [id, b] of c.bufferOfNode) nodesOfBuffer.set(b, [...(nodesOfBuffer.get(b) ?? []), id]);
  const claimed = new Set<number>();
  const out = new Map<number, BgradChoice>();
  for (const [gi, call] of [...calls].sort((x, y) => x[0] - y[0])) {
    if (call.epilogue || call.batch !== 1 || (call.outer ?? 1) > 1) continue;
    for (const operand of ["a", "b"] as const) {
      const op = call[operand];
      // A column sum of the stored [k, cols] matrix: A transposed or B as stored (file comment).
      if (op.trans !== (operand === "a") || op.offset !== 0) continue;
      const cols = operand === "a" ? call.m : call.n;
      if (op.ld !== cols) continue;
      const found = columnSum(c, consumers, outputs, nodesOfBuffer, op.buffer, call.k, cols, gi);
      if (!found || found.covers.some((k) => claimed.has(k))) continue;
      if (!biasTypeFits(call.d.dtype, found.dtype)) continue;
      found.covers.forEach((k) => claimed.add(k));
      out.set(gi, {
        call: {
          ...call,
          epilogue: {
            kind: "bgrad",
            operand,
            bias: { buffer: found.buffer, offset: 0, dtype: found.dtype, batchStride: 0 },
            fallback: found.covers.map((k) => c.kernels[k].name),
            copies: found.copies,
          },
        },
        covers: found.covers,
      });
      break;
    }
  }
  return out;
}

/**
 * The column sum over the `rows` rows of buffer `x` viewed [rows, cols] that kernels before `gemm` compute
 * and nothing else: its kernels (ascending), the vector's buffer and stored dtype, and the other buffers
 * holding the same vector; undefined if none.
 */
function columnSum(
  c: BgradContext,
  consumers: readonly NodeId[][],
  outputs: ReadonlySet<NodeId>,
  nodesOfBuffer: ReadonlyMap<number, readonly NodeId[]>,
  x: number,
  rows: number,
  cols: number,
  gemm: number,
): { covers: number[]; buffer: number; dtype: GemmDType; copies: number[] } | undefined {
  const g = c.graph, { fusion } = c;
  // Blocks summed per node (see the file comment), from X's nodes forward.
  const blocks = new Map<NodeId, number>();
  const queue: NodeId[] = [];
  for (const id of nodesOfBuffer.get(x) ?? []) {
    if (numel(g.nodes[id].type.shape) === rows * cols) (blocks.set(id, rows), queue.push(id));
  }
  while (queue.length) {
    const id = queue.shift()!;
    const q = blocks.get(id)!;
    for (const u of consumers[id]) {
      if (blocks.has(u)) continue;
      const next = blocksOf(g, u, q, cols);
      if (next === undefined) continue;
      blocks.set(u, next);
      queue.push(u);
    }
  }
  // The kernels that sum: those computing a node of fewer blocks than rows. A first pass fused with the
  // kernel producing X (a dropout or GELU backward writing dY and its per-part sums) keeps running for X;
  // the kernels computing nothing but sums are the ones the call covers.
  const sums = [
    ...new Set(
      [...blocks].filter(([id, q]) => q < rows && fusion.kernelOf[id] >= 0)
        .map(([id]) => fusion.kernelOf[id]),
    ),
  ].sort((p, q) => p - q);
  if (sums.length === 0 || sums.some((k) => k >= gemm)) return undefined;
  const covers = sums.filter((k) => [...fusion.kernels[k].members].every((m) => blocks.has(m)));
  const kept = sums.filter((k) => !covers.includes(k));
  if (covers.length === 0) return undefined;
  const inSums = (id: NodeId) => sums.includes(fusion.kernelOf[id]);
  // The vectors: the roots the rest of the plan needs (a graph output, a node computed elsewhere, a piece
  // of a flat vector assembled in place); every other root of the covered kernels, and every partial sum
  // a kept kernel writes, is read only by these kernels.
  const placed = fusion.inPlace.placed;
  const needed = (r: NodeId) => outputs.has(r) || placed.has(r) || consumers[r].some((u) => !inSums(u));
  const vectors: NodeId[] = [];
  for (const k of covers) {
    for (const r of fusion.kernels[k].roots) {
      if (!needed(r)) continue;
      if (blocks.get(r) !== 1 || numel(g.nodes[r].type.shape) !== cols) return undefined;
      vectors.push(r);
    }
  }
  const partials = kept.flatMap((k) => fusion.kernels[k].roots.filter((r) => (blocks.get(r) ?? rows) < rows));
  if (partials.some(needed)) return undefined;
  const held = vectors.map((v) => c.bufferOfNode.get(v));
  if (held.length === 0 || held.some((b) => b === undefined)) return undefined;
  const [buffer, ...copies] = held as number[];
  if (copies.some((b) => c.bufferDtype(b) !== c.bufferDtype(buffer))) return undefined;
  // Reads only X and each other's buffers; the vectors' buffers (and the flat vectors they are pieces of)
  // are written by these kernels alone and read elsewhere only after the GEMM; their other buffers are
  // read by no other kernel.
  const written = new Set([
    ...covers.flatMap((k) => c.kernels[k].bindings.filter((b) => b.access !== "read").map((b) => b.buffer)),
    ...partials.flatMap((r) => {
      const b = c.bufferOfNode.get(r);
      return b === undefined ? [] : [b];
    }),
  ]);
  for (const k of covers) {
    if (c.kernels[k].bindings.some((b) => b.access !== "write" && b.buffer !== x && !written.has(b.buffer))) {
      return undefined;
    }
  }
  const flats = new Set(vectors.flatMap((v) => {
    const at = placed.get(v);
    const b = at && c.bufferOfNode.get(at.concat);
    return b === undefined ? [] : [b];
  }));
  if (vectors.some((v) => placed.has(v)) && flats.size === 0) return undefined;
  for (let k = 0; k < c.kernels.length; k++) {
    if (sums.includes(k)) continue;
    for (const b of c.kernels[k].bindings) {
      if (flats.has(b.buffer) && b.access !== "write" && k <= gemm) return undefined;
      if (!written.has(b.buffer)) continue;
      if (!held.includes(b.buffer) || b.access !== "read" || k <= gemm) return undefined;
    }
  }
  const dtype = c.bufferDtype(buffer);
  if (dtype !== "f32" && dtype !== "f16" && dtype !== "bf16") return undefined;
  return { covers, buffer, dtype, copies };
}

/** Blocks node `u` sums given that its input sums `q` (see the file comment); undefined if it is no such sum. */
function blocksOf(g: Graph, u: NodeId, q: number, cols: number): number | undefined {
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
