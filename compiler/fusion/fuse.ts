/**
 * Fusion: groups graph nodes into kernels, consumers first (XLA's instruction fusion order).
 *
 * Walking the graph backwards, each node either joins the one kernel that reads it, or becomes the root
 * of a kernel of its own (its value is then written to a buffer). A node joins only when every user is in
 * that kernel — so each kernel has one root, all members are ancestors of it, and ordering kernels by
 * root gives a valid schedule — and when `canJoin` agrees; otherwise the reason is recorded.
 *
 * Not every node needs a kernel: inputs and params are buffers; constants, iotas, random draws and
 * movement ops on buffers are "inline" (recomputed wherever read, for free or nearly); a movement op read
 * by several kernels is a "view" (each reader folds it into its index math, and its operand is
 * materialized).
 *
 * Two kernel-level passes follow: attention (attention.ts: QKᵀ, softmax and PV become one kernel where
 * nothing else reads the probabilities) and sibling fusion (siblings.ts).
 */
import { type Graph, type NodeId, numel, sameShape } from "../../ir/mod.ts";
import { isElementwise, isMovement } from "../../ir/ops.ts";
import { fuseAttention } from "./attention.ts";
import { findInPlaceConcats } from "./in_place.ts";
import { mergeConsumers } from "./consumers.ts";
import { mergeSiblings } from "./siblings.ts";
import { ANY, describeNeeds, ELEM, OPERAND, operandNeed, parseRowCandidate, ROW, usersOf } from "./needs.ts";
import {
  type FusedKernel,
  type FusionDecision,
  type FusionResult,
  type Need,
  no,
  type Verdict,
  YES,
} from "./types.ts";

export interface FusionOptions {
  /** false: one kernel per op (constants inline; reshape/broadcast stay views) — the unfused baseline. */
  readonly fuse: boolean;
  /**
   * The attention fusion (compiler/fusion/attention.ts): on by default; false leaves attention as three
   * kernels (QKᵀ, softmax, PV) and "always" skips its shape rule — both for benchmarks.
   */
  readonly attention?: boolean | "always";
  /** Returns false when the fusion budget (FUSION_FUEL) is spent. */
  readonly takeFuel?: () => boolean;
  readonly log?: (msg: string) => void;
}

const isBuffer = (op: string) => op === "input" || op === "param";
/** Reduce kernels with fewer rows do not also write large element-level outputs (see storableHere). */
export const MIN_ROWS_FOR_ELEMENT_OUTPUTS = 16;
const isReduceOp = (op: string) => op === "reduce_sum" || op === "reduce_max";

/** Nodes computable at any index from constants and buffers alone, without a kernel of their own. */
function inlineNodes(g: Graph, fuse: boolean): Uint8Array {
  const inline = new Uint8Array(g.nodes.length);
  const cheap = (i: NodeId) => inline[i] === 1 || isBuffer(g.nodes[i].op);
  for (const n of g.nodes) {
    if (n.op === "const") inline[n.id] = 1;
    else if (!fuse) continue;
    else if (n.op === "iota") inline[n.id] = 1;
    else if (n.op === "random_uniform") inline[n.id] = cheap(n.inputs[0]) ? 1 : 0;
    else if (isMovement(n.op)) inline[n.id] = n.inputs.every(cheap) ? 1 : 0;
    else if (n.op === "cast") inline[n.id] = cheap(n.inputs[0]) ? 1 : 0; // a conversion on load is free
    else if (isElementwise(n.op)) inline[n.id] = n.inputs.every((i) => inline[i] === 1) ? 1 : 0;
  }
  return inline;
}

export function fuseGraph(g: Graph, opts: FusionOptions): FusionResult {
  const nodes = g.nodes;
  const users = usersOf(g);
  const isOutput = new Uint8Array(nodes.length);
  for (const id of g.outputs.values()) isOutput[id] = 1;
  const inline = inlineNodes(g, opts.fuse);
  // A tensor placed in a flat vector is written to its range there, so it must be a kernel's root, as
  // an output is; the concat itself is a buffer, assembled by those writes.
  const inPlace = findInPlaceConcats(g);
  for (const [id, where] of inPlace.placed) {
    isOutput[id] = 1;
    opts.log?.(`fusion: %${id} ${nodes[id].op} is written in place into flat vector %${where.concat}`);
  }
  for (const [id, why] of inPlace.refused) {
    opts.log?.(`fusion: concat %${id} is not assembled in place: ${why}`);
  }
  const isAssembled = (id: NodeId) => inPlace.concats.has(id);
  // An elementwise op on one tensor that lives in a buffer anyway, with only scalars or inline values
  // beside it (the optimizer's unscaled gradient, g * 1/scale): recomputing it in each reader reads the
  // same bytes as reading it back, so it is never written (XLA duplicates such producers too).
  const cheapOverBuffer = (id: NodeId): boolean => {
    const n = nodes[id];
    if (!isElementwise(n.op) || n.op === "cast") return false;
    let big = 0;
    for (const i of n.inputs) {
      const src = nodes[i];
      const buffer = isBuffer(src.op) || isAssembled(i);
      if (buffer && numel(src.type.shape) === numel(n.type.shape)) big++;
      else if (!inline[i] && !(buffer && numel(src.type.shape) <= 64)) return false;
    }
    return big === 1;
  };

  const kernelOf = new Int32Array(nodes.length).fill(-1);
  /** For inline nodes and views: the kernels that read them. */
  const readers: (Set<number> | undefined)[] = [];
  const needs = new Map<NodeId, Set<Need>>();
  /** For inline nodes and views: how each reading kernel reads them. */
  const viewNeeds: (Map<number, Set<Need>> | undefined)[] = [];
  /** How kernel `kid` reads operand `pos` of node `u` (empty if it does not read u). */
  const needOnOperand = (u: NodeId, pos: number, kid: number): Set<Need> => {
    const un = nodes[u];
    if (kernelOf[u] === kid) return operandNeed(g, un, pos, needs.get(u)!);
    const vn = viewNeeds[u]?.get(kid);
    return vn ? operandNeed(g, un, pos, vn) : new Set();
  };
  const needOf = (id: NodeId, kid: number): Set<Need> => {
    const out = new Set<Need>();
    for (const u of users[id]) {
      nodes[u].inputs.forEach((inp, pos) => {
        if (inp === id) { for (const x of needOnOperand(u, pos, kid)) out.add(x); }
      });
    }
    return out;
  };
  const kernels: FusedKernel[] = [];
  const decisions: FusionDecision[] = [];
  let fuelRefusals = 0;

  const newKernel = (id: NodeId): void => {
    const n = nodes[id];
    const k: FusedKernel = {
      id: kernels.length,
      kind: "loop",
      roots: [id],
      members: new Set([id]),
      space: n.type.shape,
    };
    if (n.op === "matmul") {
      k.kind = "matmul";
      k.anchor = id;
    } else if (isReduceOp(n.op)) {
      k.kind = "reduce";
      k.space = nodes[n.inputs[0]].type.shape;
      k.axes = n.attrs.axes as number[];
    } else if (n.op === "scatter_add") {
      k.kind = "scatter";
      k.space = nodes[n.inputs[1]].type.shape;
      k.anchor = id;
    }
    needs.set(id, new Set([k.kind === "reduce" ? ROW : ELEM]));
    kernels.push(k);
    kernelOf[id] = k.id;
  };

  for (let id = nodes.length - 1; id >= 0; id--) {
    const n = nodes[id];
    if (isBuffer(n.op) || isAssembled(id)) continue;
    const readerKernels = new Set<number>();
    for (const u of users[id]) {
      if (kernelOf[u] >= 0) readerKernels.add(kernelOf[u]);
      else for (const k of readers[u] ?? []) readerKernels.add(k);
    }
    const isView = !isOutput[id] &&
      (inline[id] || readerKernels.size === 0 ||
        (opts.fuse
          ? ((isMovement(n.op) || n.op === "cast") && n.op !== "concat" && n.op !== "pad" ||
            cheapOverBuffer(id)) && readerKernels.size > 1
          : n.op === "reshape" || n.op === "broadcast")); // unfused: views as in eager frameworks
    if (isView) {
      // Each reader folds the index math in (views of a node read by several kernels make it a buffer).
      readers[id] = readerKernels;
      viewNeeds[id] = new Map([...readerKernels].map((k) => [k, needOf(id, k)]));
      continue;
    }
    if (!opts.fuse || readerKernels.size === 0) {
      newKernel(id);
      continue;
    }
    // A bias add written anyway whose GEMM is read by nothing else: keep it as the root of its own kernel,
    // so the GEMM takes it as its epilogue (joining a reader would strand the GEMM's raw output).
    if (
      (readerKernels.size > 1 || isOutput[id]) && n.op === "add" &&
      n.inputs.some((i) => nodes[i].op === "matmul" && users[i].length === 1 && !isOutput[i]) &&
      n.inputs.some((i) => nodes[i].op === "broadcast") // a linear layer's bias
    ) {
      for (const k of readerKernels) {
        decisions.push({
          producer: id,
          consumerKernel: k,
          ok: false,
          reason: "kept as the epilogue of its GEMM",
        });
      }
      newKernel(id);
      continue;
    }
    // Several readers (or a graph output): the value must be written to a buffer anyway, so compute it
    // in the earliest reader and write it from there (multi-output fusion). Only the earliest, so every
    // other reader still runs after the kernel that writes it.
    const kid = readerKernels.size === 1
      ? [...readerKernels][0]
      : [...readerKernels].reduce((a, b) => (kernels[a].roots[0] < kernels[b].roots[0] ? a : b));
    const extraRoot = readerKernels.size > 1 || isOutput[id] === 1;
    const k = kernels[kid];
    const need = needOf(id, kid);
    let verdict = extraRoot ? storableHere(g, id, k, need) : YES;
    if (verdict.ok) verdict = canJoin(g, id, k, need, needs);
    if (verdict.ok && opts.takeFuel && !opts.takeFuel()) {
      verdict = no("FUSION_FUEL is spent");
      fuelRefusals++;
    }
    decisions.push({
      producer: id,
      consumerKernel: kid,
      ok: verdict.ok,
      reason: verdict.ok ? "" : verdict.reason,
    });
    opts.log?.(
      `fusion: %${id} ${n.op}${n.loc ? ` (${n.loc})` : ""} into kernel ${kid} (${k.kind}): ${
        verdict.ok ? "yes" : `no: ${verdict.reason}`
      }`,
    );
    if (verdict.ok) {
      if (extraRoot) k.roots.push(id);
      k.members.add(id);
      kernelOf[id] = kid;
      needs.set(id, need);
    } else {
      newKernel(id);
    }
  }

  // Schedule by main root (the node that opened the kernel, its last member): every member is an
  // ancestor of it, and an extra root is only written by the earliest of its readers, so this order runs
  // every kernel after the kernels whose buffers it reads.
  const order = [...kernels].sort((a, b) => a.roots[0] - b.roots[0]);
  const renumber = new Int32Array(kernels.length);
  order.forEach((k, i) => (renumber[k.id] = i));
  const scheduled = order.map((k, i) => ({ ...k, id: i, roots: [...k.roots].sort((a, b) => a - b) }));
  for (let i = 0; i < kernelOf.length; i++) if (kernelOf[i] >= 0) kernelOf[i] = renumber[kernelOf[i]];
  const materialized = new Set<NodeId>();
  for (const n of nodes) if (isBuffer(n.op) || isAssembled(n.id)) materialized.add(n.id);
  for (const k of scheduled) for (const r of k.roots) materialized.add(r);
  const result: FusionResult = {
    kernels: scheduled,
    kernelOf,
    materialized,
    decisions: decisions.map((d) => ({ ...d, consumerKernel: renumber[d.consumerKernel] })),
    fuelRefusals,
    inPlace,
  };
  if (!opts.fuse) return result;
  // Attention first, while its softmax kernel is still alone (a sibling merge would give it more roots).
  const withAttention = opts.attention === false ? result : fuseAttention(g, result, {
    takeFuel: opts.takeFuel,
    log: opts.log,
    always: opts.attention === "always",
  });
  return mergeConsumers(g, mergeSiblings(g, withAttention, opts.takeFuel), opts.takeFuel);
}

/**
 * May `id` (all of whose users are in kernel `k`) be computed inside `k`? May adapt `k` (a loop kernel
 * becomes a reduce or matmul kernel when it absorbs one).
 */
function canJoin(
  g: Graph,
  id: NodeId,
  k: FusedKernel,
  need: Set<Need>,
  needs: Map<NodeId, Set<Need>>,
): Verdict {
  const n = g.nodes[id];
  if (need.has(OPERAND) && !(isMovement(n.op) || n.op === "cast" || n.op === "stop_gradient")) {
    return no(
      `a matmul operand may be read through movement and casts only; ${n.op} would be recomputed per tile`,
    );
  }
  if (n.op === "scatter_add") return no("scatter_add writes whole rows; its result is materialized");
  if (n.op === "matmul") {
    if (k.kind !== "loop") return no(`a matmul epilogue cannot go into a ${k.kind} kernel`);
    if (need.size !== 1 || !need.has(ELEM)) {
      return no(`the matmul result is read as ${describeNeeds(need)}, not elementwise`);
    }
    if (numel(n.type.shape) !== numel(k.space)) {
      return no("the epilogue iterates over a different number of elements");
    }
    k.kind = "matmul";
    k.anchor = id;
    return YES;
  }
  if (!(n.op === "reduce_sum" || n.op === "reduce_max")) return YES;

  // A reduction: it must be read at the row level of a kernel reducing the same tensor over the same axes.
  if (k.kind === "matmul" || k.kind === "scatter") {
    return no(`a ${k.kind} kernel does not contain reductions`);
  }
  const inShape = g.nodes[n.inputs[0]].type.shape;
  const axes = n.attrs.axes as number[];
  const sameAxes = (a: readonly number[] | undefined) =>
    a !== undefined && a.length === axes.length && a.every((x, i) => x === axes[i]);
  const levels = [...need].map((x) => {
    const rc = parseRowCandidate(x);
    if (rc) return sameShape(rc.shape, inShape) && sameAxes(rc.axes) ? "row" : "other-row";
    return x;
  });
  if (levels.some((l) => l !== "row" && l !== ROW && l !== ELEM)) {
    return no(`its result is read as ${describeNeeds(need)}: the reduction would be recomputed per element`);
  }
  const rowLevel = levels.every((l) => l === "row" || l === ROW);
  if (k.kind === "reduce") {
    if (!sameShape(k.space, inShape) || !sameAxes(k.axes)) {
      return no(
        `the kernel reduces [${k.space}] over axes [${k.axes}], this reduces [${inShape}] over [${axes}]`,
      );
    }
    if (!rowLevel) return no("its result is read at the element level of a reduce kernel");
    need.clear();
    need.add(ROW);
    return YES;
  }
  // k is a loop kernel.
  if (rowLevel) {
    if (numel(k.space) !== numel(inShape)) return no("the reduced tensor and the kernel differ in size");
    return joinAtRowLevel(k, need, inShape, axes);
  }
  if (!levels.every((l) => l === ELEM)) return no(`its result is read as ${describeNeeds(need)}`);
  // Read elementwise by a kernel over the reduced shape: that kernel becomes the reduction's epilogue,
  // computed once per row.
  if (numel(k.space) !== numel(n.type.shape)) return no("the kernel iterates over a different shape");
  for (const m of k.members) {
    const ms = needs.get(m)!;
    if ([...ms].some((x) => x !== ELEM && x !== ANY)) {
      return no("the kernel's members are read at several levels; cannot turn it into a row epilogue");
    }
  }
  for (const m of k.members) {
    const ms = needs.get(m)!;
    if (ms.delete(ELEM)) ms.add(ROW);
  }
  return joinAtRowLevel(k, need, inShape, axes);
}

/**
 * A node the kernel must also write (an extra root) is stored where the kernel iterates: at each element
 * of its space, or once per row of a reduce kernel. A node read at any other index cannot be.
 */
function storableHere(g: Graph, id: NodeId, k: FusedKernel, need: Set<Need>): Verdict {
  const size = numel(g.nodes[id].type.shape);
  const only = need.size === 1 ? [...need][0] : undefined;
  if (only === ELEM && size === numel(k.space)) {
    // A reduction with few rows runs on few workgroups; element-level outputs there would lose the
    // parallelism of a kernel of their own (a loss summed over a whole activation, say).
    const rows = k.kind === "reduce" ? numel(k.space) / numel(k.axes!.map((a) => k.space[a])) : Infinity;
    if (rows < MIN_ROWS_FOR_ELEMENT_OUTPUTS && size >= 65536) {
      return no(`the kernel reduces to ${rows} row(s); writing ${size} elements there would serialize them`);
    }
    return YES;
  }
  if (only === ROW && k.kind === "reduce") return YES;
  // Read through a broadcast from this reduce kernel's rows: that is a row-level value here.
  const rc = only === undefined ? undefined : parseRowCandidate(only);
  if (rc && k.kind === "reduce" && sameShape(rc.shape, k.space) && rc.axes.join() === k.axes!.join()) {
    return YES;
  }
  // A loop kernel reading a per-row value through a broadcast (LayerNorm's 1/σ, softmax's sum) becomes a
  // row kernel over those rows, which computes the value once per row and can write it — and can then take
  // the reductions that produce it.
  if (rc && k.kind === "loop" && numel(rc.shape) === numel(k.space)) {
    // Not when there would be few rows: a scalar broadcast over a whole vector (the optimizer's overflow
    // flag) would turn an elementwise kernel into one workgroup walking every element.
    const rows = numel(rc.shape) / numel(rc.axes.map((a) => rc.shape[a]));
    if (rows < MIN_ROWS_FOR_ELEMENT_OUTPUTS && numel(k.space) >= 65536) {
      return no(
        `it is a value per row of ${rows} row(s); a row kernel over ${
          numel(k.space)
        } elements would serialize them`,
      );
    }
    return joinAtRowLevel(k, need, rc.shape, rc.axes);
  }
  return no(`it is read as ${describeNeeds(need)} here, so this kernel cannot also write it`);
}

/** Makes `k` a row kernel reducing `axes` of `space`, with the joining node read at row level. */
function joinAtRowLevel(
  k: FusedKernel,
  need: Set<Need>,
  space: readonly number[],
  axes: readonly number[],
): Verdict {
  k.kind = "reduce";
  k.space = space;
  k.axes = axes;
  need.clear();
  need.add(ROW);
  return YES;
}
