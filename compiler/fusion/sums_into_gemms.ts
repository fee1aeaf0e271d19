/**
 * Sums into library GEMMs (cuBLASLt's C with β = 1): on CUDA plans whose GEMMs write their raw products, an
 * add of a product p and a tensor y already stored moves into p's own matmul kernel, whose root becomes the
 * add: cuBLASLt computes D = op(A)·op(B) + 1·C with C = y's buffer, and the template GEMM, the fallback, the
 * same add in its epilogue. XLA's GEMM rewriter does the same. A fusion decision, not the library-calls
 * stage's (BERT's figures, numerics: DESIGN.md, notes: compiler/fusion/sums_into_gemms.ts).
 */
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { keepsElements as passesThrough } from "../passes/gemm_sum_order.ts";
import type { FusedKernel, FusionDecision, FusionResult } from "./types.ts";
import { usersOf } from "../graph/users.ts";

/**
 * Matmul kernels of the calls in `rawCalls`, writing a raw product that an add in one reader sums with an
 * earlier stored tensor, take the add (and the reshapes and casts on the way) as their root; kernels in
 * order, so a chain of sums becomes a chain of calls. `takeFuel`: false stops (FUSION_FUEL).
 */
export function sumsIntoGemms(
  g: Graph,
  f: FusionResult,
  rawCalls: ReadonlySet<NodeId>,
  takeFuel: () => boolean,
  log?: (line: string) => void,
): FusionResult {
  const users = usersOf(g);
  const outputs = new Set(g.outputs.values());
  const kernels: FusedKernel[] = f.kernels.map((k) => ({
    ...k,
    roots: [...k.roots],
    members: new Set(k.members),
  }));
  const kernelOf = Int32Array.from(f.kernelOf);
  const materialized = new Set(f.materialized);
  const decisions: FusionDecision[] = [];
  const single = (id: NodeId) => users[id].length === 1 && !outputs.has(id) ? users[id][0] : undefined;
  for (const [i, k] of kernels.entries()) {
    const p = k.anchor;
    if (
      k.kind !== "matmul" || p === undefined || !rawCalls.has(p) || k.roots.length !== 1 || k.roots[0] !== p
    ) {
      continue;
    }
    // From p to the add: one user each, computed by one reader r (or inline views computed where read).
    const chain: NodeId[] = [];
    let cur = p, next = single(p);
    while (next !== undefined && passesThrough(g, next) && !materialized.has(next)) {
      chain.push(next);
      cur = next;
      next = single(next);
    }
    if (next === undefined || g.nodes[next].op !== "add") continue;
    const add = next;
    const r = kernelOf[add];
    if (r <= i || chain.some((c) => kernelOf[c] !== r && kernelOf[c] >= 0)) continue;
    const [x, z] = g.nodes[add].inputs;
    if (x === z) continue;
    const y = x === cur ? z : x;
    // y: a buffer written before this kernel runs (or an input), read through reshapes and casts to f32
    // that only this add reads (another product, summed first by gemm_sum_order.ts).
    const yChain: NodeId[] = [];
    let stored = y;
    while (!materialized.has(stored) && passesThrough(g, stored) && single(stored) !== undefined) {
      yChain.push(stored);
      stored = g.nodes[stored].inputs[0];
    }
    if (!materialized.has(stored) || kernelOf[stored] >= i) continue;
    if (numel(g.nodes[stored].type.shape) !== numel(g.nodes[add].type.shape)) continue;
    if (yChain.some((c) => kernelOf[c] !== r && kernelOf[c] >= 0)) continue;
    // The reader keeps something to write, or had nothing else to compute (it goes).
    const reader = kernels[r];
    const moving = new Set([...chain, ...yChain, add].filter((n) => kernelOf[n] === r));
    if (reader.roots.every((w) => w === add) && [...reader.members].some((m) => !moving.has(m))) continue;
    if (!takeFuel()) break;
    for (const n of [...chain, ...yChain, add]) {
      if (kernelOf[n] !== r) continue;
      reader.members.delete(n);
      k.members.add(n);
      kernelOf[n] = i;
    }
    k.roots.splice(0, 1, add);
    reader.roots.splice(0, reader.roots.length, ...reader.roots.filter((w) => w !== add));
    materialized.delete(p);
    materialized.add(add);
    const reason = `the sum with %${stored} is the GEMM's C (beta 1), no longer computed by kernel ${r}`;
    decisions.push({ producer: add, consumerKernel: i, ok: true, reason });
    log?.(`gemm sums: %${add} joins kernel ${i} (%${p}): ${reason}`);
  }
  if (decisions.length === 0) return f;
  // Kernels left with nothing to write go; the others are renumbered in order.
  const kept = kernels.filter((k) => k.roots.length > 0);
  const newIndex = new Int32Array(kernels.length).fill(-1);
  kept.forEach((k, j) => newIndex[k.id] = j);
  const renumbered = kept.map((k, j) => ({ ...k, id: j }));
  const of = kernelOf.map((x) => (x < 0 ? x : newIndex[x]));
  return { ...f, kernels: renumbered, kernelOf: of, materialized, decisions: [...f.decisions, ...decisions] };
}
