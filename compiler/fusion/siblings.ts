/**
 * Sibling fusion: after producer-consumer fusion, kernels that iterate over the same space and read a
 * common tensor are merged into one multi-output kernel, which reads the shared tensor once and saves a
 * launch (cross-entropy's row reductions; LayerNorm backward's dγ and dβ), when neither depends on the
 * other. After consumer merging, mergeSameWriter merges reductions whose inputs one kernel wrote (DESIGN.md,
 * notes: compiler/fusion/siblings.ts).
 */
import { bindingCount } from "./binding_budget.ts";
import { type Graph, type NodeId, numel, sameShape } from "../../ir/mod.ts";
import { readsOf } from "./kernel_facts.ts";
import { isLibraryColumnSum } from "./library_sums.ts";
import type { FusedKernel, FusionDecision, FusionResult } from "./types.ts";

/**
 * A merged kernel binds at most this many buffers where WGSL is emitted (desktop WebGPU adapters allow at
 * least 16; compiler/stages/fusion.ts mergeBindingLimit).
 */
export const MAX_SIBLING_BINDINGS = 12;
/** Refused sibling merges are reported only when the shared tensor has at least this many elements. */
export const MIN_SHARED_ELEMENTS = 1024;

function sameSpace(a: FusedKernel, b: FusedKernel): boolean {
  if (a.kind === "reduce" && b.kind === "reduce") {
    return sameShape(a.space, b.space) && a.axes!.join() === b.axes!.join();
  }
  if (a.kind === "loop" && b.kind === "loop") return numel(a.space) === numel(b.space);
  return false;
}

/** The kernels being merged, what each reads and depends on, a merge, and the schedule afterwards. */
export function mergeState(g: Graph, r: FusionResult) {
  const kernels = r.kernels.map((k) => ({ ...k, members: new Set(k.members), roots: [...k.roots] }));
  const alive = kernels.map(() => true);
  const reads = kernels.map((k) => readsOf(g, r, k));
  const writerOf = new Map<NodeId, number>();
  kernels.forEach((k, i) => k.roots.forEach((x) => writerOf.set(x, i)));
  const decisions: FusionDecision[] = [...r.decisions];

  // A flat vector assembled in place has no writer of its own: the kernels writing its parts are what a
  // reader of the vector depends on (the optimizer's update reads the gradients written by the backward).
  const partsOf = new Map<NodeId, NodeId[]>();
  for (const [part, where] of r.inPlace.placed) {
    partsOf.set(where.concat, [...(partsOf.get(where.concat) ?? []), part]);
  }
  /** Kernels a kernel reads from. */
  const preds = (i: number) => {
    const p = new Set<number>();
    for (const x of reads[i]) {
      for (const y of partsOf.get(x) ?? [x]) {
        const w = writerOf.get(y);
        if (w !== undefined && w !== i) p.add(w);
      }
    }
    return p;
  };
  /** Is kernel `to` reachable from `from` along read edges (from writes something `to` needs)? */
  const dependsOn = (to: number, from: number): boolean => {
    const stack = [to];
    const seen = new Set<number>();
    while (stack.length) {
      const x = stack.pop()!;
      for (const p of preds(x)) {
        if (p === from) return true;
        if (!seen.has(p)) {
          seen.add(p);
          stack.push(p);
        }
      }
    }
    return false;
  };

  /** The buffers kernels i and j would bind merged: what either reads or writes, once each. */
  const mergedBindings = (i: number, j: number, maxBindingBytes?: number) =>
    bindingCount(
      g,
      new Set([...reads[i], ...reads[j], ...kernels[i].roots, ...kernels[j].roots]),
      maxBindingBytes,
    );
  /** Merges kernel j into kernel i. */
  const merge = (i: number, j: number) => {
    for (const m of kernels[j].members) kernels[i].members.add(m);
    kernels[i].roots.push(...kernels[j].roots);
    for (const root of kernels[j].roots) writerOf.set(root, i);
    // Roots the merged kernel writes itself are no longer reads of it.
    reads[i] = new Set([...reads[i], ...reads[j]].filter((y) => writerOf.get(y) !== i));
    alive[j] = false;
    decisions.push({ producer: kernels[j].roots[0], consumerKernel: i, ok: true, reason: "" });
  };
  /** The surviving kernels in a topological order, renumbered. */
  const finish = (): FusionResult => {
    // Topological order of the surviving kernels, preferring original order.
    const ids = kernels.map((_, i) => i).filter((i) => alive[i]);
    const indeg = new Map<number, number>(ids.map((i) => [i, preds(i).size]));
    const succ = new Map<number, number[]>(ids.map((i) => [i, []]));
    for (const i of ids) for (const p of preds(i)) succ.get(p)!.push(i);
    const ready = ids.filter((i) => indeg.get(i) === 0);
    const order: number[] = [];
    while (ready.length) {
      ready.sort((a, b) => a - b);
      const i = ready.shift()!;
      order.push(i);
      for (const s of succ.get(i)!) {
        indeg.set(s, indeg.get(s)! - 1);
        if (indeg.get(s) === 0) ready.push(s);
      }
    }
    if (order.length !== ids.length) throw new Error("internal: sibling fusion made the kernel graph cyclic");
    const renumber = new Map(order.map((old, i) => [old, i]));
    const scheduled = order.map((old, i) => ({
      ...kernels[old],
      id: i,
      roots: [...kernels[old].roots].sort((a, b) => a - b),
    }));
    const kernelOf = new Int32Array(r.kernelOf.length).fill(-1);
    for (const k of scheduled) for (const m of k.members) kernelOf[m] = k.id;
    return {
      kernels: scheduled,
      kernelOf,
      materialized: r.materialized,
      decisions: decisions.map((d) => ({
        ...d,
        consumerKernel: renumber.get(d.consumerKernel) ?? d.consumerKernel,
      })),
      fuelRefusals: r.fuelRefusals,
      inPlace: r.inPlace,
    };
  };
  return {
    kernels,
    alive,
    reads,
    writerOf,
    partsOf,
    decisions,
    preds,
    dependsOn,
    mergedBindings,
    merge,
    finish,
  };
}

export function mergeSiblings(
  g: Graph,
  r: FusionResult,
  takeFuel?: () => boolean,
  maxBindings = MAX_SIBLING_BINDINGS,
  maxBindingBytes?: number,
): FusionResult {
  const limit = maxBindings;
  const { kernels, alive, reads, decisions, dependsOn, mergedBindings, merge, finish } = mergeState(g, r);
  // Group candidates by (space, axes) and try to merge each with the earlier ones sharing a read.
  const byReads = new Map<NodeId, number[]>();
  kernels.forEach((_, i) => reads[i].forEach((x) => byReads.set(x, [...(byReads.get(x) ?? []), i])));
  // A scalar read by everything (the learning rate) pairs every parameter update with every other: merging
  // them is welcome (fewer launches), but their refusals would flood the report, so only refusals between
  // kernels sharing a sizeable tensor are recorded.
  const worthReporting = (x: NodeId) => numel(g.nodes[x].type.shape) >= MIN_SHARED_ELEMENTS;
  // Pairs sharing the largest tensors merge first: they save the most bytes, and a merge of two small
  // kernels can make one depend on a kernel it could otherwise have merged with (LAMB's per-segment sums of
  // the gradient and weight norms, merged, put the weight norm before the update kernel, which then could
  // not take it in and read bert-large's 1.3 GB of weights twice).
  const shared = [...byReads.keys()].sort((a, b) =>
    numel(g.nodes[b].type.shape) - numel(g.nodes[a].type.shape) || a - b
  );
  for (const x of shared) {
    const readers = byReads.get(x)!;
    for (const i of readers) {
      if (!alive[i] || (kernels[i].kind !== "reduce" && kernels[i].kind !== "loop")) continue;
      for (const j of readers) {
        if (j <= i || !alive[j] || !alive[i] || !sameSpace(kernels[i], kernels[j])) continue;
        const count = mergedBindings(i, j, maxBindingBytes);
        // A merge that shares only a small tensor saves a launch, not bytes: it keeps to the portable cap,
        // so it cannot take the loop kernels that consumer merging would fold into their producer instead
        // (LAMB's "keep or update" selects of m and v, which would then re-read the new moments).
        if (count > (worthReporting(x) ? limit : Math.min(limit, MAX_SIBLING_BINDINGS))) {
          if (!worthReporting(x)) continue;
          decisions.push({
            producer: kernels[j].roots[0],
            consumerKernel: i,
            ok: false,
            reason: `sibling merge would bind ${count} buffers`,
          });
          continue;
        }
        if (dependsOn(j, i) || dependsOn(i, j)) continue;
        if (takeFuel && !takeFuel()) continue;
        merge(i, j);
      }
    }
  }
  return finish();
}

/**
 * Reductions of one space over the same axes whose inputs were all written by one kernel merge, though
 * they share no tensor: a LayerNorm backward's dγ and dβ second passes, each summing its own per-part sums
 * of the kernel that computes dY (compiler/passes/split_column_sums.ts), which mergeSiblings leaves apart. Merged, they
 * read no more bytes and save a launch; and since each waits for nothing but that one kernel, so does the
 * merged kernel (no order the rest of the schedule relies on changes). Run after consumer merging, which is
 * what puts the dγ first pass into the kernel computing dY and its dβ first pass. The column sums a BGRAD
 * epilogue may take stay apart (the flash backward writes dQ, dK and dV: their bias sums are three calls').
 */
export function mergeSameWriter(
  g: Graph,
  r: FusionResult,
  takeFuel?: () => boolean,
  maxBindings = MAX_SIBLING_BINDINGS,
  maxBindingBytes?: number,
  bgradSums?: ReadonlyMap<NodeId, ReadonlySet<NodeId>>,
): FusionResult {
  const { kernels, reads, writerOf, partsOf, preds, dependsOn, mergedBindings, merge, finish } = mergeState(
    g,
    r,
  );
  /** The one kernel that wrote everything kernel i reads (no graph input, no second kernel), if any. */
  const soleWriter = (i: number): number | undefined => {
    const written = [...reads[i]].every((x) => (partsOf.get(x) ?? [x]).every((y) => writerOf.has(y)));
    const [w, ...others] = preds(i);
    return written && others.length === 0 ? w : undefined;
  };
  const groups = new Map<string, number[]>();
  kernels.forEach((k, i) => {
    const library = bgradSums?.size && isLibraryColumnSum(g, k, bgradSums);
    const w = k.kind === "reduce" && !library ? soleWriter(i) : undefined;
    if (w === undefined) return;
    const key = `${w}|${k.space.join()}|${k.axes!.join()}`;
    groups.set(key, [...(groups.get(key) ?? []), i]);
  });
  let merged = 0;
  for (const [i, ...rest] of groups.values()) {
    for (const j of rest) {
      // They share nothing, so the merge saves a launch, not bytes: it keeps to the portable cap.
      if (mergedBindings(i, j, maxBindingBytes) > Math.min(maxBindings, MAX_SIBLING_BINDINGS)) continue;
      if (dependsOn(j, i) || dependsOn(i, j)) continue;
      if (takeFuel && !takeFuel()) continue;
      merge(i, j);
      merged++;
    }
  }
  return merged === 0 ? r : finish();
}
