/**
 * Fusion: groups graph nodes into kernels, consumers first (XLA's instruction fusion order). Walking the
 * graph backwards, a node joins the one kernel that reads it when every user is in that kernel and the
 * decision (join.ts `decideJoin`) says yes, else it roots a kernel of its own and the reason is recorded.
 * Inputs, params, inline values and views need no kernel; the kernel-level fusions (attention, siblings,
 * consumers) follow as stages (DESIGN.md, notes: compiler/fusion/fuse.ts).
 */
import { bindingCount } from "./binding_budget.ts";
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { isElementwise, isMovement } from "../../ir/ops.ts";
import { findInPlaceConcats } from "./in_place.ts";
import { applyJoin, decideJoin } from "./join.ts";
import { isLibraryColumnSum } from "./library_sums.ts";
import { rematVerdict } from "./remat.ts";
import { ELEM, operandNeed, ROW } from "./needs.ts";
import { type FusedKernel, type FusionDecision, type FusionResult, type Need, no } from "./types.ts";
import { inlineNodes, usersOf } from "../graph/users.ts";
import { type GraphCalls, RAW_CALL_EPILOGUE } from "../passes/gemm_calls.ts";

export interface FusionOptions {
  /** false: one kernel per op (constants inline; reshape/broadcast stay views) — the unfused baseline. */
  readonly fuse: boolean;
  /** Returns false when the fusion budget (FUSION_FUEL) is spent. */
  readonly takeFuel?: () => boolean;
  readonly log?: (msg: string) => void;
  /**
   * The most buffers one kernel may bind (the device's storage buffers per shader stage; WebGPU
   * guarantees 8); unlimited when undefined.
   */
  readonly maxBindings?: number;
  /** The most bytes one binding may see: a larger value counts one binding per range (binding_budget.ts). */
  readonly maxBindingBytes?: number;
  /** Nodes written to a buffer even where a reader could compute them (compiler/passes/low_weight_copies.ts). */
  readonly roots?: ReadonlySet<NodeId>;
  /**
   * The library calls decided on the graph: those that write their raw product have no fused epilogue
   * (remat.ts RematGraph), and the column sums their BGRAD epilogues may take stay out of other kernels.
   */
  readonly calls?: GraphCalls;
  /**
   * Kernels decided before fusion (the flash-attention claims): taken as they are, their roots written,
   * and not readers of what they read (they read stored values and compute the views between on load).
   */
  readonly seeded?: readonly { readonly roots: readonly NodeId[]; readonly members: ReadonlySet<NodeId> }[];
}

const isBuffer = (op: string) => op === "input" || op === "param";
const isReduceOp = (op: string) => op === "reduce_sum" || op === "reduce_max";

/**
 * Producer-consumer fusion, consumers first; with `fuse: false`, one kernel per op (the unfused
 * baseline). Flat vectors assembled in place are found here in both cases.
 */
export function fuseProducers(g: Graph, opts: FusionOptions): FusionResult {
  const nodes = g.nodes;
  const users = usersOf(g);
  const isOutput = new Uint8Array(nodes.length);
  for (const id of g.outputs.values()) isOutput[id] = 1;
  for (const id of opts.roots ?? []) isOutput[id] = 1;
  const inline = inlineNodes(g, opts.fuse);
  for (const id of opts.roots ?? []) inline[id] = 0;
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
  // A cheap elementwise chain over one stored tensor (GELU's x/2, x/√2, erf(x/√2) + 1 over the
  // pre-activation) is recomputed in each reader rather than stored (remat.ts has the cost rule);
  // `rematSources` are the stored tensors such chains were recomputed from.
  const rematSources = new Set<NodeId>();
  const rematGraph = {
    g,
    users,
    inline,
    stored: (id: NodeId) => isBuffer(nodes[id].op) || isAssembled(id) || isOutput[id] === 1,
    rawCalls: opts.calls?.raw,
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

  /**
   * The buffers kernel `k` would bind with `id` joined: its roots, and every operand outside it that is
   * not computed where read (inline nodes are looked through to the buffers they read). Operands not yet
   * decided count as buffers; one that joins later is checked again then.
   */
  const bindingsAfterJoin = (k: FusedKernel, id: NodeId, extraRoot: boolean): number => {
    const members = new Set([...k.members, id]);
    const read = new Set<NodeId>();
    const visit = (x: NodeId): void => {
      if (members.has(x) || read.has(x)) return;
      // Inline nodes and views are computed here from what they read (`readers` is set for those only).
      if ((inline[x] || readers[x] !== undefined) && !isBuffer(nodes[x].op)) nodes[x].inputs.forEach(visit);
      else if (nodes[x].op !== "const") read.add(x);
    };
    for (const m of members) nodes[m].inputs.forEach(visit);
    return bindingCount(g, [...k.roots, ...(extraRoot ? [id] : []), ...read], opts.maxBindingBytes);
  };

  // A view is computed in each reader, which then binds what it reads instead of it (a cheap product of a
  // buffer and a scalar binds both): each reader must stay within the target's bindings.
  const viewFits = (id: NodeId, readerKernels: ReadonlySet<number>): boolean =>
    opts.maxBindings === undefined ||
    [...readerKernels].every((k) => bindingsAfterJoin(kernels[k], id, false) <= opts.maxBindings!);

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

  // Seeded kernels come first; their space is their results' shape, so those are stored like any kernel's
  // (storage precision keeps an attention kernel's roots of another size f32, as row statistics).
  for (const { roots, members } of opts.seeded ?? []) {
    const sorted = [...roots].sort((a, b) => a - b);
    kernels.push({
      id: kernels.length,
      kind: "attention",
      roots: sorted,
      members: new Set(members),
      space: nodes[sorted[0]].type.shape,
    });
    for (const m of members) kernelOf[m] = kernels.length - 1;
  }
  const seededKernels = kernels.length;
  for (let id = nodes.length - 1; id >= 0; id--) {
    const n = nodes[id];
    if (isBuffer(n.op) || isAssembled(id) || kernelOf[id] >= 0) continue;
    const readerKernels = new Set<number>();
    for (const u of users[id]) {
      if (kernelOf[u] >= seededKernels) readerKernels.add(kernelOf[u]); // seeded ones are not readers
      else for (const k of readers[u] ?? []) readerKernels.add(k);
    }
    // Computed in each of several readers: movement ops, casts, cheap products of a buffer, and cheap
    // chains over a stored tensor (remat.ts), the last asked only where the others do not apply.
    const several = opts.fuse && readerKernels.size > 1;
    const cheapView = several &&
      ((isMovement(n.op) || n.op === "cast") && n.op !== "concat" && n.op !== "pad" || cheapOverBuffer(id));
    const remat = several && !cheapView && !inline[id] && !isOutput[id]
      ? rematVerdict(rematGraph, id)
      : undefined;
    const isView = !isOutput[id] &&
      (inline[id] || readerKernels.size === 0 ||
        (opts.fuse
          ? (cheapView || remat?.ok === true) && viewFits(id, readerKernels)
          : n.op === "reshape" || n.op === "broadcast")); // unfused: views as in eager frameworks
    if (isView && remat?.ok) {
      rematSources.add(remat.from);
      opts.log?.(
        `fusion: %${id} ${n.op} is recomputed in its ${readerKernels.size} readers from %${remat.from} ` +
          `(${remat.ops} ops, ${remat.transcendentals} transcendental), not stored`,
      );
    }
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
    // Several readers (or a graph output): the value must be written to a buffer anyway, so compute it
    // in the earliest reader and write it from there (multi-output fusion). Only the earliest, so every
    // other reader still runs after the kernel that writes it.
    // On library-GEMM plans a column sum of a call's operand is left to the call's BGRAD epilogue (the sums
    // found on the graph, passes/gemm_calls.ts): not a candidate, and the value is written before it runs.
    const bgradSums = opts.calls?.bgradSums;
    const leftToLibrary = bgradSums?.size
      ? [...readerKernels].filter((k) => isLibraryColumnSum(g, kernels[k], bgradSums, id))
      : [];
    const candidates = [...readerKernels].filter((k) => !leftToLibrary.includes(k));
    const kid = candidates.length === 0
      ? -1
      : candidates.reduce((a, b) => (kernels[a].roots[0] < kernels[b].roots[0] ? a : b));
    if (kid < 0 || leftToLibrary.some((k) => kernels[k].roots[0] < kernels[kid].roots[0])) {
      for (const k of leftToLibrary) {
        decisions.push({
          producer: id,
          consumerKernel: k,
          ok: false,
          reason: "its column sum is left to the bias-gradient epilogue of the GEMM reading it",
        });
      }
      newKernel(id);
      continue;
    }
    // A bias add written anyway whose GEMM is read by nothing else: keep it as the root of its own kernel,
    // so the GEMM takes it as its epilogue (joining a reader would strand the GEMM's raw output) — except
    // where chains are recomputed from it and its earliest reader is the loop kernel computing the
    // activation: the GEMM joins that kernel too, which then writes the pre-activation and the activation.
    const epilogueHere = rematSources.has(id) && kernels[kid].kind === "loop";
    if (
      !epilogueHere && (readerKernels.size > 1 || isOutput[id]) && n.op === "add" &&
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
    const extraRoot = readerKernels.size > 1 || isOutput[id] === 1;
    const k = kernels[kid];
    const need = needOf(id, kid);
    let verdict = decideJoin(g, id, k, need, needs, extraRoot);
    // A call that writes its raw product (cuBLASLt) and is stored anyway: as a reader's epilogue it would
    // also write a scratch product for that reader to read back; alone, its readers read the one. Nor does
    // its kernel compute more than the call's own epilogue (gemm_calls.ts RAW_CALL_EPILOGUE).
    if (verdict.ok && opts.calls?.raw.has(id)) {
      if (extraRoot) {
        verdict = no("the library GEMM writes its product, stored anyway: its readers read that");
      } else if ([...k.members].some((m) => !RAW_CALL_EPILOGUE.has(nodes[m].op))) {
        verdict = no("the library GEMM stores its product: its reader computes more than its epilogue");
      }
    }
    if (verdict.ok && opts.maxBindings !== undefined) {
      const bindings = bindingsAfterJoin(k, id, extraRoot);
      if (bindings > opts.maxBindings) {
        verdict = no(`the kernel would bind ${bindings} buffers, over the target's ${opts.maxBindings}`);
      }
    }
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
      applyJoin(k, id, need, verdict.adapt, needs, extraRoot);
      kernelOf[id] = kid;
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
  return {
    kernels: scheduled,
    kernelOf,
    materialized,
    decisions: decisions.map((d) => ({ ...d, consumerKernel: renumber[d.consumerKernel] })),
    fuelRefusals,
    inPlace,
  };
}
