/**
 * Consumer merging (XLA's multi-output fusion of a consumer into its producer): after the other fusion
 * passes, an elementwise loop kernel that reads a value another kernel writes, at the same elements, is
 * folded into that producer kernel when everything else it reads already exists there. The producer then
 * computes and writes the consumer's values too, and a value only the consumer read need not be written.
 * The case that matters: DESIGN.md, notes: compiler/fusion/consumers.ts.
 */
import { bindingCount } from "./binding_budget.ts";
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { isElementwise } from "../../ir/ops.ts";
import { readsOf } from "./kernel_facts.ts";
import { ELEM, operandNeed, parseRowCandidate } from "./needs.ts";
import type { FusedKernel, FusionDecision, FusionResult, Need } from "./types.ts";

/**
 * A merged kernel binds at most this many buffers where WGSL is emitted (desktop WebGPU adapters allow at
 * least 16; compiler/stages/fusion.ts mergeBindingLimit).
 */
export const MAX_MERGED_BINDINGS = 16;
/** Roots of at most this many elements may move to the kernel that computes their operands. */
const SMALL = 64;

export function mergeConsumers(
  g: Graph,
  r: FusionResult,
  takeFuel?: () => boolean,
  maxBindings = MAX_MERGED_BINDINGS,
  maxBindingBytes?: number,
): FusionResult {
  const limit = maxBindings;
  const kernels: FusedKernel[] = r.kernels.map((k) => ({
    ...k,
    members: new Set(k.members),
    roots: [...k.roots],
  }));
  const alive = kernels.map(() => true);
  const outputs = new Set(g.outputs.values());
  const placed = r.inPlace.placed;
  const writer = new Map<NodeId, number>();
  kernels.forEach((k, i) => k.roots.forEach((x) => writer.set(x, i)));
  const decisions: FusionDecision[] = [...r.decisions];
  let reads = kernels.map((k) => readsOf(g, r, k));

  /** The kernel index by which `x` exists, or -1 for buffers present before the step. */
  const readyAt = (x: NodeId): number => {
    const w = writer.get(x);
    if (w !== undefined) return w;
    if (r.inPlace.concats.has(x)) {
      let last = -1;
      for (const [part, where] of placed) {
        if (where.concat === x) last = Math.max(last, writer.get(part) ?? -1);
      }
      return last;
    }
    return -1;
  };

  hoistSmallRoots();
  let materialized = materializedNow();

  for (let j = 0; j < kernels.length; j++) {
    const k2 = kernels[j];
    const size = numel(k2.space);
    if (k2.kind === "loop") {
      if (![...k2.members].every((m) => numel(g.nodes[m].type.shape) === size)) continue;
    } else if (k2.kind !== "reduce") continue;
    // The producer: the latest kernel whose roots this one reads (everything else must be older).
    const producers = [...reads[j]].map(readyAt).filter((i) => i >= 0 && i !== j);
    if (producers.length === 0) continue;
    const i = Math.max(...producers);
    const k1 = kernels[i];
    if (!alive[i] || (k1.kind !== "loop" && k1.kind !== "reduce") || numel(k1.space) !== size) continue;
    // A reduction folds only into a producer reducing the same space over the same axes (LayerNorm
    // backward's dγ partial sums into the kernel that writes dY and its dβ partial sums): it then reads
    // dY where it is computed instead of from memory.
    if (k2.kind === "reduce" && !sameReduction(k1, k2)) continue;
    const decide = (ok: boolean, reason: string) =>
      decisions.push({ producer: k2.roots[0], consumerKernel: i, ok, reason });
    const mismatch = readAtAnotherIndex(g, r.materialized, k1, k2);
    if (mismatch !== undefined) {
      decide(false, mismatch);
      continue;
    }
    // Every other value it reads must exist before the producer runs.
    const late = [...reads[j]].find((x) => writer.get(x) !== i && readyAt(x) >= i);
    if (late !== undefined) {
      decide(false, `it also reads %${late}, which kernel ${readyAt(late)} writes after its producer runs`);
      continue;
    }
    const merged = new Set([...k1.members, ...k2.members]);
    const roots = [...merged].filter((m) => isRoot(m, i, j)).sort((a, b) => a - b);
    const inputs = new Set([...reads[i], ...reads[j]].filter((x) => !merged.has(x)));
    const bindings = bindingCount(g, [...inputs, ...roots], maxBindingBytes);
    if (bindings > limit) {
      decide(false, `merging into its producer would bind ${bindings} buffers`);
      continue;
    }
    if (takeFuel && !takeFuel()) continue;
    for (const m of k2.members) k1.members.add(m);
    k1.roots.splice(0, k1.roots.length, ...roots);
    for (const x of roots) writer.set(x, i);
    for (const x of k2.roots) if (!roots.includes(x)) writer.delete(x);
    alive[j] = false;
    // Only k1 and the kernels that read a value the merge stopped storing read anything new: the rest keep
    // their reads (recomputing every kernel's after each merge was most of this stage's time).
    const before = materialized;
    materialized = materializedNow();
    const dropped = [...before].filter((x) => !materialized.has(x));
    const now = { ...r, materialized };
    const stale = (rs: ReadonlySet<NodeId>, k: number) => k === i || dropped.some((x) => rs.has(x));
    reads = reads.map((rs, k) => (stale(rs, k) ? readsOf(g, now, kernels[k]) : rs));
    decide(true, "");
  }

  /**
   * A small elementwise root computed from the roots of one earlier kernel (the optimizer's overflow flag,
   * `||g|| <= max`, from the kernel that computes ||g||) moves into that kernel, so its readers can merge
   * with kernels that run before the one consumer-first fusion happened to put it in.
   */
  function hoistSmallRoots(): void {
    for (let k = 0; k < kernels.length; k++) {
      for (const x of [...kernels[k].roots]) {
        const n = g.nodes[x];
        if (numel(n.type.shape) > SMALL || !isElementwise(n.op) || outputs.has(x) || placed.has(x)) continue;
        // A kernel whose only root this is would be left writing nothing.
        if (kernels[k].roots.length < 2) continue;
        const from = new Set<number>();
        let ok = true;
        // Inline operands (views, broadcasts, constants) are computed where read: look through them. The
        // producer computes `x` at its own element, so only a read at that element (through reshapes and
        // casts, which keep the linear index) may move: a permute or a slice reads another element.
        for (const { inp, atElement } of n.inputs.flatMap((i) => computedBy(i, true))) {
          const w = writer.get(inp);
          if (w !== undefined && atElement && numel(g.nodes[inp].type.shape) === numel(n.type.shape)) {
            from.add(w);
          } else if (w !== undefined || r.materialized.has(inp) || r.kernelOf[inp] >= 0) ok = false;
        }
        if (!ok || from.size !== 1) continue;
        const p = [...from][0];
        if (p >= k) continue;
        // It adds one root to the producer, which must stay within the target's bindings.
        if (bindingCount(g, [...reads[p], ...kernels[p].roots, x], maxBindingBytes) > limit) continue;
        if (takeFuel && !takeFuel()) continue;
        kernels[k].members.delete(x);
        kernels[k].roots.splice(kernels[k].roots.indexOf(x), 1);
        kernels[p].members.add(x);
        kernels[p].roots.push(x);
        kernels[p].roots.sort((a, b) => a - b);
        writer.set(x, p);
        decisions.push({ producer: x, consumerKernel: p, ok: true, reason: "" });
      }
    }
    reads = kernels.map((k) => readsOf(g, r, k));
  }

  /**
   * The values computed in a kernel or present in a buffer that computing `x` where it is read needs, each
   * with whether it is read at the same linear index as `x` (only reshapes and casts in between).
   */
  function computedBy(x: NodeId, atElement: boolean): { inp: NodeId; atElement: boolean }[] {
    if (writer.has(x) || r.materialized.has(x) || r.kernelOf[x] >= 0) return [{ inp: x, atElement }];
    const n = g.nodes[x];
    const keeps = n.op === "reshape" || n.op === "cast";
    return n.inputs.flatMap((i) => computedBy(i, atElement && keeps));
  }

  /** Is `m` (computed by kernels a and b once merged) read by another kernel, an output or a placed part? */
  function isRoot(m: NodeId, a: number, b: number): boolean {
    if (outputs.has(m) || placed.has(m)) return true;
    for (let k = 0; k < kernels.length; k++) {
      if (alive[k] && k !== a && k !== b && reads[k].has(m)) return true;
    }
    return false;
  }

  function materializedNow(): Set<NodeId> {
    const out = new Set<NodeId>();
    for (const x of r.materialized) if (writer.has(x) || r.kernelOf[x] < 0) out.add(x);
    for (const x of writer.keys()) out.add(x);
    return out;
  }

  const order = kernels.map((_, i) => i).filter((i) => alive[i]);
  const renumber = new Map(order.map((old, i) => [old, i]));
  const scheduled = order.map((old, i) => ({ ...kernels[old], id: i }));
  const kernelOf = new Int32Array(r.kernelOf.length).fill(-1);
  for (const k of scheduled) for (const m of k.members) kernelOf[m] = k.id;
  return {
    kernels: scheduled,
    kernelOf,
    materialized: materializedNow(),
    decisions: decisions.map((d) => ({
      ...d,
      consumerKernel: renumber.get(d.consumerKernel) ?? d.consumerKernel,
    })),
    fuelRefusals: r.fuelRefusals,
    inPlace: r.inPlace,
  };
}

/**
 * Why the consumer `k2` merged into `k1` would read a value of `k1` at an index other than the one `k1`
 * computes it at (undefined when it would not). The merged kernel iterates `k1`'s space and computes each
 * member of `k1` at the current element (a reduce kernel: its reductions at the current row), so `k2` must
 * read every root of `k1` at the element level, or through a broadcast along `k1`'s reduced axes at the row
 * level; a read through index math (a permute, a slice) would take the value computed for another element.
 * Over a space of another shape (the optimizer's flat vectors against their rows) only the linear index is
 * common, so every read of `k2` must then be at the element level.
 */
export function readAtAnotherIndex(
  g: Graph,
  materialized: ReadonlySet<NodeId>,
  k1: FusedKernel,
  k2: FusedKernel,
): string | undefined {
  // How each node under k2 is read, from k2's members (read at the element) down to the buffers.
  const needs = new Map<NodeId, Set<Need>>();
  const under = new Set<NodeId>();
  const visit = (x: NodeId) => {
    if (under.has(x)) return;
    under.add(x);
    if (k2.members.has(x) || !materialized.has(x)) g.nodes[x].inputs.forEach(visit);
  };
  for (const m of k2.members) visit(m);
  for (const x of [...under].sort((a, b) => b - a)) {
    if (k2.members.has(x) && k2.roots.includes(x)) {
      (needs.get(x) ?? needs.set(x, new Set()).get(x)!).add(ELEM);
    }
    if (!k2.members.has(x) && materialized.has(x)) continue;
    const n = g.nodes[x];
    const have = needs.get(x) ?? new Set<Need>();
    n.inputs.forEach((inp, pos) => {
      const into = needs.get(inp) ?? needs.set(inp, new Set()).get(inp)!;
      for (const need of operandNeed(g, n, pos, have)) into.add(need);
    });
  }
  if (k1.space.join(",") !== k2.space.join(",")) {
    // Only the linear element index is common to both spaces: every read must be at the element.
    for (const [x, xs] of needs) {
      const other = [...xs].find((n) => n !== ELEM);
      if (other !== undefined && numel(g.nodes[x].type.shape) > 1) {
        return `it iterates [${k2.space.join(", ")}], its producer [${k1.space.join(", ")}], and it reads ` +
          `%${x} at an index that depends on the shape (${other})`;
      }
    }
  }
  for (const x of k1.roots) {
    for (const need of needs.get(x) ?? []) {
      if (need === ELEM && numel(g.nodes[x].type.shape) === numel(k1.space)) continue;
      const row = parseRowCandidate(need);
      if (
        row && k1.kind === "reduce" && row.shape.join(",") === k1.space.join(",") &&
        row.axes.join(",") === [...(k1.axes ?? [])].sort((a, b) => a - b).join(",")
      ) continue;
      return `it reads %${x} at another index than its producer computes it at (${need})`;
    }
  }
  return undefined;
}

/** Both reduce kernels iterate one space and reduce the same axes. */
function sameReduction(a: FusedKernel, b: FusedKernel): boolean {
  return a.kind === "reduce" && b.kind === "reduce" && a.space.join() === b.space.join() &&
    (a.axes ?? []).join() === (b.axes ?? []).join();
}
