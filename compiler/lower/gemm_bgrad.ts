/**
 * Bias gradients as cuBLASLt epilogues (issue 16 item 1): the dW GEMM's BGRADA/BGRADB epilogue computes the
 * bias gradient db = Σ_tokens dY, a column sum of the operand it reads anyway, so the column-sum kernels
 * leave the step. Recognized on the fusion, before buffers, by how many row blocks of X each node sums; the
 * kernels stay in the plan as the call's fallback, and only CUDA plans whose kernel order lets either path
 * write the vector take it (DESIGN.md, notes: compiler/lower/gemm_bgrad.ts).
 */
import { type DType, type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { readsOf } from "../fusion/kernel_facts.ts";
import type { FusionResult } from "../fusion/types.ts";
import { biasTypeFits, type GemmDType, type GemmShape } from "./gemm_library.ts";
import { kernelName } from "./naming.ts";
import { blocksOf } from "../passes/gemm_calls.ts";
import type { PlanGemm } from "../../plan/plan.ts";

/** What bgradEpilogues reads: the graph, the fusion (before buffers) and what each node is stored as. */
export interface BgradContext {
  readonly graph: Graph;
  readonly fusion: FusionResult;
  readonly storedType: (id: NodeId) => DType;
}

/** The bias-gradient epilogue a call takes: `bias` and `copies` name nodes, as the call's operands do. */
export type BgradEpilogue = Extract<NonNullable<PlanGemm["epilogue"]>, { kind: "bgrad" }>;

/** What a call is to bgradEpilogues: sizes, operands naming nodes, D's dtype, whether it has an epilogue. */
export type BgradCall = GemmShape & { readonly dDtype: GemmDType; readonly epilogue: boolean };

/**
 * For each library GEMM (kernel index -> its call) that can take over a column sum, the bias-gradient
 * epilogue it takes. Each column sum goes to one call at most.
 */
export function bgradEpilogues(
  c: BgradContext,
  calls: ReadonlyMap<number, BgradCall>,
): Map<number, BgradEpilogue> {
  const g = c.graph;
  const consumers: NodeId[][] = g.nodes.map(() => []);
  for (const n of g.nodes) for (const i of new Set(n.inputs)) consumers[i].push(n.id);
  const outputs = new Set(g.outputs.values());
  const reads = c.fusion.kernels.map((k) => readsOf(g, c.fusion, k));
  const claimed = new Set<number>();
  const out = new Map<number, BgradEpilogue>();
  for (const [gi, call] of [...calls].sort((x, y) => x[0] - y[0])) {
    if (call.epilogue || call.batch !== 1 || (call.outer ?? 1) > 1) continue;
    for (const operand of ["a", "b"] as const) {
      const op = call[operand];
      // A column sum of the stored [k, cols] matrix: A transposed or B as stored (file comment).
      if (op.trans !== (operand === "a") || op.offset !== 0) continue;
      const cols = operand === "a" ? call.m : call.n;
      if (op.ld !== cols) continue;
      const found = columnSum(c, consumers, outputs, reads, op.buffer, call.k, cols, gi);
      if (!found || found.covers.some((k) => claimed.has(k))) continue;
      if (!biasTypeFits(call.dDtype, found.dtype)) continue;
      found.covers.forEach((k) => claimed.add(k));
      out.set(gi, {
        kind: "bgrad",
        operand,
        bias: { buffer: found.vector, offset: 0, dtype: found.dtype, batchStride: 0 },
        fallback: found.covers.map((k) => kernelName(g, c.fusion.kernels[k])),
        copies: found.copies,
      });
      break;
    }
  }
  return out;
}

/**
 * The column sum over the `rows` rows of node `x` viewed [rows, cols] that kernels before `gemm` compute and
 * nothing else: its kernels (ascending), the vector's node and stored dtype, and the other nodes holding the
 * same vector; undefined if none.
 */
function columnSum(
  c: BgradContext,
  consumers: readonly NodeId[][],
  outputs: ReadonlySet<NodeId>,
  reads: readonly ReadonlySet<NodeId>[],
  x: NodeId,
  rows: number,
  cols: number,
  gemm: number,
): { covers: number[]; vector: NodeId; dtype: GemmDType; copies: NodeId[] } | undefined {
  const g = c.graph, { fusion } = c;
  // Blocks summed per node (see the file comment), from X forward.
  const blocks = new Map<NodeId, number>();
  const queue: NodeId[] = [];
  if (numel(g.nodes[x].type.shape) === rows * cols) (blocks.set(x, rows), queue.push(x));
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
  if (vectors.length === 0) return undefined;
  const [vector, ...copies] = vectors;
  if (copies.some((v) => c.storedType(v) !== c.storedType(vector))) return undefined;
  // Reads only X and each other's values; the vectors (and the flat vectors they are pieces of) are written
  // by these kernels alone and read elsewhere only after the GEMM; their other roots are read by no other
  // kernel.
  const written = new Set([...covers.flatMap((k) => fusion.kernels[k].roots), ...partials]);
  for (const k of covers) if ([...reads[k]].some((r) => r !== x && !written.has(r))) return undefined;
  const flats = new Set(vectors.flatMap((v) => {
    const at = placed.get(v);
    return at ? [at.concat] : [];
  }));
  if (vectors.some((v) => placed.has(v)) && flats.size === 0) return undefined;
  for (let k = 0; k < fusion.kernels.length; k++) {
    if (sums.includes(k)) continue;
    if (fusion.kernels[k].roots.some((r) => written.has(r))) return undefined;
    for (const r of reads[k]) {
      if (flats.has(r) && k <= gemm) return undefined;
      if (written.has(r) && (!vectors.includes(r) || k <= gemm)) return undefined;
    }
  }
  const dtype = c.storedType(vector);
  if (dtype !== "f32" && dtype !== "f16" && dtype !== "bf16") return undefined;
  return { covers, vector, dtype, copies };
}
