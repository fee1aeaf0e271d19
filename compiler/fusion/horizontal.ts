/**
 * Horizontal fusion of small reductions: reduce kernels over one space and axes that each move little
 * data and share nothing, neither waiting for the other, become one kernel of several outputs, as XLA's
 * horizontal loop fusion does: each was mostly its launch. At most MAX_MERGED_SMALL join one (registers);
 * on library-GEMM plans the column sums a BGRAD epilogue may take stay apart (the figures and both rules:
 * DESIGN.md, notes: compiler/fusion/horizontal.ts).
 */
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { storedBytes } from "../../plan/plan.ts";
import { isLibraryColumnSum } from "./library_sums.ts";
import { mergeState } from "./siblings.ts";
import type { FusionResult } from "./types.ts";

/** The most small reductions one merged kernel takes. */
export const MAX_MERGED_SMALL = 8;

/** Bytes a set of values occupies at their graph dtypes' widths (an upper bound on what is stored). */
function bytesOf(g: Graph, values: Iterable<NodeId>): number {
  let bytes = 0;
  for (const x of values) bytes += numel(g.nodes[x].type.shape) * storedBytes(g.nodes[x].type.dtype);
  return bytes;
}

export function mergeSmallReductions(
  g: Graph,
  r: FusionResult,
  maxBytes: number,
  takeFuel?: () => boolean,
  maxBindings = Infinity,
  maxBindingBytes?: number,
  bgradSums: ReadonlyMap<NodeId, ReadonlySet<NodeId>> = new Map(),
): FusionResult {
  if (maxBytes <= 0) return r;
  const { kernels, alive, reads, writerOf, dependsOn, mergedBindings, merge, finish } = mergeState(g, r);
  // The BGRAD fallbacks: first passes (or one-pass sums) of a GEMM operand, then what reads only them.
  const fallback = new Set<number>();
  if (bgradSums.size > 0) {
    kernels.forEach((k, i) => {
      if (isLibraryColumnSum(g, k, bgradSums)) fallback.add(i);
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
