/**
 * Horizontal fusion of small reductions: reduce kernels over one space and axes that each move little
 * data and share nothing, neither waiting for the other, become one kernel of several outputs, as XLA's
 * horizontal loop fusion does: each was mostly its launch. At most MAX_MERGED_SMALL join one (registers);
 * on library-GEMM plans the column sums a BGRAD epilogue may take stay apart (the figures and both rules:
 * DESIGN.md, notes: compiler/fusion/horizontal.ts).
 */
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { storedBytes } from "../../plan/plan.ts";
import { mergeState } from "./siblings.ts";
import type { FusedKernel, FusionResult } from "./types.ts";
import { usersOf } from "../graph/users.ts";

/** The most small reductions one merged kernel takes. */
export const MAX_MERGED_SMALL = 8;

/** Bytes a set of values occupies at their graph dtypes' widths (an upper bound on what is stored). */
function bytesOf(g: Graph, values: Iterable<NodeId>): number {
  let bytes = 0;
  for (const x of values) bytes += numel(g.nodes[x].type.shape) * storedBytes(g.nodes[x].type.dtype);
  return bytes;
}

/** Ops that pass a tensor's elements on, as far as which matmul reads them goes. */
const PASSES_ON = new Set(["reshape", "cast", "permute"]);

/**
 * Does kernel `k` compute nothing but a sum of a tensor over rows (through views), where a matmul reads
 * that tensor (through views, either way): a bias gradient that a GEMM's BGRAD epilogue may compute?
 */
function mayBeBiasGradient(g: Graph, users: readonly NodeId[][], k: FusedKernel): boolean {
  if (k.kind !== "reduce") return false;
  const sums = [...k.members].filter((m) => g.nodes[m].op === "reduce_sum");
  if (sums.length !== 1 || ![...k.members].every((m) => m === sums[0] || PASSES_ON.has(g.nodes[m].op))) {
    return false;
  }
  const seen = new Set<NodeId>();
  const stack = [g.nodes[sums[0]].inputs[0]];
  while (stack.length) {
    const id = stack.pop()!;
    if (seen.has(id)) continue;
    seen.add(id);
    for (const u of users[id]) {
      if (g.nodes[u].op === "matmul") return true;
      if (PASSES_ON.has(g.nodes[u].op)) stack.push(u);
    }
    if (PASSES_ON.has(g.nodes[id].op)) stack.push(g.nodes[id].inputs[0]);
  }
  return false;
}

export function mergeSmallReductions(
  g: Graph,
  r: FusionResult,
  maxBytes: number,
  takeFuel?: () => boolean,
  maxBindings = Infinity,
  maxBindingBytes?: number,
  rawGemmOutputs = false,
): FusionResult {
  if (maxBytes <= 0) return r;
  const { kernels, alive, reads, writerOf, dependsOn, mergedBindings, merge, finish } = mergeState(g, r);
  // The BGRAD fallbacks: first passes (or one-pass sums) of a GEMM operand, then what reads only them.
  const fallback = new Set<number>();
  if (rawGemmOutputs) {
    const users = usersOf(g);
    kernels.forEach((k, i) => {
      if (mayBeBiasGradient(g, users, k)) fallback.add(i);
    });
    kernels.forEach((_, i) => {
      const from = [...reads[i]].map((x) => writerOf.get(x));
      if (from.length > 0 && from.every((w) => w !== undefined && fallback.has(w))) fallback.add(i);
    });
  }
  const groups = new Map<string, number[]>();
  kernels.forEach((k, i) => {
    if (k.kind !== "reduce" || k.rowBlock || fallback.has(i)) return;
    if (bytesOf(g, [...reads[i], ...k.roots]) > maxBytes) return;
    const key = `${k.space.join()}|${k.axes!.join()}`;
    groups.set(key, [...(groups.get(key) ?? []), i]);
  });
  let merged = 0;
  for (const members of groups.values()) {
    for (let a = 0; a < members.length; a++) {
      const i = members[a];
      if (!alive[i]) continue;
      let joined = 1;
      for (let b = a + 1; b < members.length && joined < MAX_MERGED_SMALL; b++) {
        const j = members[b];
        if (!alive[j] || dependsOn(j, i) || dependsOn(i, j)) continue;
        if (mergedBindings(i, j, maxBindingBytes) > maxBindings) continue;
        if (takeFuel && !takeFuel()) return merged === 0 ? r : finish();
        merge(i, j);
        joined++;
        merged++;
      }
    }
  }
  return merged === 0 ? r : finish();
}
