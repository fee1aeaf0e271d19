/**
 * Mixed-precision policy, storage level: which dtype each materialized value is stored in. After fusion the
 * activations that live in buffers between kernels are narrowed to f16/bf16, half the bytes stored and
 * loaded, while every kernel still computes in f32; the graph's types do not change. Interfaces, reductions
 * and their statistics, scatter accumulators and concats stay f32, except an update direction and, on CUDA,
 * the flat gradient. `roundTripGraph` is the graph the fused plan computes, for the reference interpreter.
 * Why each rule is safe: DESIGN.md, notes: compiler/storage/storage_precision.ts.
 */
import { type DType, Graph, isElementwise, isMovement, type NodeId, numel } from "../../ir/mod.ts";
import type { FusionResult } from "../fusion/types.ts";
import type { Precision } from "../training_graph/mixed_precision.ts";
import { LOW_DTYPE } from "../training_graph/mixed_precision.ts";
import { UPDATE_PREFIX } from "../../plan/plan.ts";
import { flatGradientNodes } from "./flat_gradients.ts";
import { usersOf, VIEW_OPS, weightsReadOnlyLow } from "../graph/users.ts";

/** Why a materialized f32 value keeps f32 storage. */
export type KeepReason =
  | "graph output"
  | "reduction result"
  | "row statistic"
  | "scatter-add accumulator"
  | "concat operand"
  | "concat result"
  | "feeds an output elementwise";

export interface StoragePlan {
  readonly precision: Precision;
  /** The low-precision float type activations are stored in (f32 for fp32: nothing narrows). */
  readonly low: DType;
  /** Materialized values stored in `low` although the graph types them f32. */
  readonly narrowed: ReadonlySet<NodeId>;
  /** Materialized f32 kernel results that stay f32, with the reason. */
  readonly kept: ReadonlyMap<NodeId, KeepReason>;
  /** Parameters stored in `low` because every use rounds them to it (`weightsReadOnlyLow`). */
  readonly lowWeights: ReadonlySet<NodeId>;
  /** The dtype a node's buffer holds (its graph dtype unless narrowed). */
  storedType(id: NodeId): DType;
}

/** The plan that narrows nothing (fp32, or a lowering without a policy). */
export function fullStorage(g: Graph): StoragePlan {
  return {
    precision: "fp32",
    low: "f32",
    narrowed: new Set(),
    kept: new Map(),
    lowWeights: new Set(),
    storedType: (id) => g.nodes[id].type.dtype,
  };
}

/** Chooses the stored dtype of every materialized value of a fused graph (see the file comment). */
export function chooseStorage(
  g: Graph,
  fusion: FusionResult,
  precision: Precision,
  opts: { readonly flatGradients?: boolean } = {},
): StoragePlan {
  if (precision === "fp32") return fullStorage(g);
  const low = LOW_DTYPE[precision];
  const flat = opts.flatGradients ? flatGradientNodes(g, fusion, low) : new Set<NodeId>();
  const outputs = new Set(g.outputs.values());
  const users = usersOf(g);
  const steps = descentSteps(g);

  // Whether a value reaches a concat through views, or a graph output through elementwise ops and views
  // other than as an update direction itself (one backward walk: users come after their operands). Only
  // the direction is exempt, not what it is computed from: an unfused plan materializes LAMB's m̂ and v̂,
  // and v̂ = v/(1 − β2ᵗ) ≈ 1e-3·g² is far below f16's range (stored low, it was 0, and u = m̂/ε came out
  // 77 times too large for BERT's bias gradients on the first step; seen on an H200, issue 24).
  // The steps s·d and their factors, through products and views ((0.1·tᵀ)·2): what the update direction
  // rule exempts.
  const factors = new Set<NodeId>();
  for (let walk = [...steps.values()], id = walk.pop(); id !== undefined; id = walk.pop()) {
    if (factors.has(id)) continue;
    factors.add(id);
    const op = g.nodes[id].op;
    if (op === "mul" || (isMovement(op) && op !== "concat")) walk.push(...g.nodes[id].inputs);
  }
  const toConcat = new Uint8Array(g.nodes.length);
  const reaches = new Uint8Array(g.nodes.length); // reaches an output, through a step or not
  const toOutput = new Uint8Array(g.nodes.length);
  for (let id = g.nodes.length - 1; id >= 0; id--) {
    if (outputs.has(id)) reaches[id] = toOutput[id] = 1;
    for (const u of users[id]) {
      const op = g.nodes[u].op;
      if (op === "concat") toConcat[id] = 1;
      else if (isMovement(op) && toConcat[u]) toConcat[id] = 1;
      if ((isElementwise(op) || isMovement(op)) && reaches[u]) {
        reaches[id] = 1;
        // The step never counts through its descent, a factor only if the factor it scales reaches the
        // output otherwise; what a factor is computed from (m̂ and √v̂ + ε of LAMB's quotient) counts.
        if (steps.get(u) === id) continue;
        if (factors.has(id) && factors.has(u) ? toOutput[u] : reaches[u]) toOutput[id] = 1;
      }
    }
  }

  // Statistics: a reduction, or computed from one elementwise or by a view that keeps its elements (not
  // a broadcast back to the activations' shape, nor a concat with other values); one forward walk.
  const statistic = new Uint8Array(g.nodes.length);
  for (const n of g.nodes) {
    if (n.op === "reduce_sum" || n.op === "reduce_max") statistic[n.id] = 1;
    else if ((isElementwise(n.op) || VIEW_OPS.has(n.op)) && n.inputs.some((i) => statistic[i])) {
      statistic[n.id] = 1;
    }
  }

  // The flat gradient rule's values (all materialized, all f32) narrow whoever writes them.
  const narrowed = new Set<NodeId>(flat);
  const kept = new Map<NodeId, KeepReason>();
  // Materialized by no kernel: a flat vector assembled in place from its parts (fusion/in_place.ts).
  for (const id of fusion.materialized) {
    const n = g.nodes[id];
    if (fusion.kernelOf[id] < 0 && n.op === "concat" && n.type.dtype === "f32" && !flat.has(id)) {
      kept.set(id, "concat result");
    }
  }
  for (const k of fusion.kernels) {
    for (const r of k.roots) {
      const n = g.nodes[r];
      if (n.type.dtype !== "f32" || flat.has(r)) continue;
      let why: KeepReason | undefined;
      if (outputs.has(r)) why = "graph output";
      else if (n.op === "reduce_sum" || n.op === "reduce_max") why = "reduction result";
      else if (n.op === "concat") why = "concat result";
      else if (k.kind === "scatter" && r === k.anchor) why = "scatter-add accumulator";
      else if (toConcat[r]) why = "concat operand";
      else if (toOutput[r]) why = "feeds an output elementwise";
      else if (
        statistic[r] ||
        ((k.kind === "reduce" || k.kind === "attention") && numel(n.type.shape) !== numel(k.space))
      ) {
        why = "row statistic";
      }
      if (why) kept.set(r, why);
      else narrowed.add(r);
    }
  }
  const lowWeights = new Set(weightsReadOnlyLow(g, low, users));
  return {
    precision,
    low,
    narrowed,
    kept,
    lowWeights,
    storedType: (id) => (narrowed.has(id) || lowWeights.has(id) ? low : g.nodes[id].type.dtype),
  };
}

/**
 * The descent steps of the update direction rule (see the file comment): each `sub(old, s·d)` (a `mul`)
 * that reaches the update output `new:NAME` of the value `old` that NAME names (an input, a parameter or
 * an output) through elementwise ops and views, mapped to its step product `s·d`. (An accumulation
 * `acc + g` is no descent step: its operand is the state's next value itself, not a scaled change of it.)
 */
export function descentSteps(g: Graph): Map<NodeId, NodeId> {
  const steps = new Map<NodeId, NodeId>();
  for (const [name, out] of g.outputs) {
    if (!name.startsWith(UPDATE_PREFIX)) continue;
    const target = name.slice(UPDATE_PREFIX.length);
    const old = g.outputs.get(target) ?? g.sources("input").get(target)?.id ??
      g.sources("param").get(target)?.id;
    if (old === undefined) continue;
    const seen = new Set<NodeId>();
    const walk = [out];
    for (let id = walk.pop(); id !== undefined; id = walk.pop()) {
      const n = g.nodes[id];
      if (seen.has(id) || !(isElementwise(n.op) || isMovement(n.op))) continue;
      seen.add(id);
      const [a, d] = n.inputs;
      if (n.op === "sub" && a === old && g.nodes[d].op === "mul") steps.set(id, d);
      else walk.push(...n.inputs);
    }
  }
  return steps;
}

/** Buffers and bytes the policy narrowed (at their graph dtype, and as stored). */
export function narrowingSummary(
  g: Graph,
  s: StoragePlan,
): { buffers: number; bytesBefore: number; bytesAfter: number; kept: Map<KeepReason, number> } {
  let bytesBefore = 0, bytesAfter = 0;
  for (const id of s.narrowed) {
    const n = numel(g.nodes[id].type.shape);
    bytesBefore += 4 * n;
    bytesAfter += (s.low === "f32" ? 4 : 2) * n;
  }
  const kept = new Map<KeepReason, number>();
  for (const why of s.kept.values()) kept.set(why, (kept.get(why) ?? 0) + 1);
  return { buffers: s.narrowed.size, bytesBefore, bytesAfter, kept };
}

/**
 * The graph the fused plan computes, for the reference interpreter (see the file comment). A value is
 * rebuilt once per kernel that computes it: inside its own kernel a narrowed value is the unrounded f32
 * one, every other kernel reads it rounded. Kernels compute every float in f32 and round only at a cast to
 * a low type and at a store, where the interpreter rounds each low-typed node: so each low-typed node
 * computed in a kernel gets an f32 twin (the same op on its operands' twins), its value is the twin
 * rounded, and a node of another type (a cast to f32, a comparison) reads the twins of its low operands.
 * (Not modelled: a scatter-add into a low-typed buffer rounds at every addition.) `g` and `fusion` are the
 * compiled ones (after simplification).
 */
export function roundTripGraph(g: Graph, fusion: FusionResult, s: StoragePlan): Graph {
  const out = new Graph(`${g.name}-as-stored`, g.precision);
  const N = g.nodes.length;
  const kernelOf = fusion.kernelOf;
  // A value read from a buffer: an input, a parameter, another kernel's root, or a node materialized by
  // no kernel (a flat vector assembled in place from its parts' buffers).
  const loaded = (id: NodeId, ctx: number) => fusion.materialized.has(id) && kernelOf[id] !== ctx;
  const isLow = (id: NodeId) => g.nodes[id].type.dtype === "f16" || g.nodes[id].type.dtype === "bf16";

  // The kernels each node is computed in, found from its readers (one backward walk).
  const ctxs: Set<number>[] = Array.from({ length: N }, () => new Set());
  const STORED = -1; // the context of materialized nodes computed by no kernel
  for (let id = N - 1; id >= 0; id--) {
    if (kernelOf[id] >= 0) ctxs[id].add(kernelOf[id]);
    else if (fusion.materialized.has(id)) ctxs[id].add(STORED);
    for (const ctx of ctxs[id]) {
      for (const i of g.nodes[id].inputs) if (!loaded(i, ctx)) ctxs[i].add(ctx);
    }
  }

  const value = new Map<string, NodeId>(); // `${id}@${ctx}` -> the value as the graph types it
  const twin = new Map<string, NodeId>(); // `${id}@${ctx}` -> a low value before rounding, in f32
  const stored: NodeId[] = new Array(N);
  const widen = (x: NodeId) => out.add("cast", [x], { to: "f32" });
  const valueIn = (id: NodeId, ctx: number): NodeId =>
    loaded(id, ctx) ? stored[id] : value.get(`${id}@${ctx}`)!;
  const twinIn = (id: NodeId, ctx: number): NodeId =>
    loaded(id, ctx) ? widen(stored[id]) : twin.get(`${id}@${ctx}`)!;
  for (const n of g.nodes) {
    for (const ctx of [...ctxs[n.id]].sort((a, b) => a - b)) {
      const key = `${n.id}@${ctx}`;
      const source = n.op === "input" || n.op === "param";
      if (isLow(n.id) && !source && n.op !== "cast") {
        // Computed in f32 from the operands' unrounded values; the graph's value is that, rounded.
        const ins = n.inputs.map((i) => (isLow(i) ? twinIn(i, ctx) : valueIn(i, ctx)));
        const t = out.add(n.op, ins, n.attrs, { shape: n.type.shape, dtype: "f32" }, n.loc);
        twin.set(key, t);
        value.set(key, out.add("cast", [t], { to: n.type.dtype }, undefined, n.loc));
        continue;
      }
      // A cast rounds (to a low type) or widens its operand's unrounded value; other ops read low operands
      // only to compare them.
      const ins = n.inputs.map((i) => (isLow(i) && !source ? twinIn(i, ctx) : valueIn(i, ctx)));
      const v = out.add(n.op, ins, n.attrs, n.type, n.loc);
      value.set(key, v);
      if (isLow(n.id)) twin.set(key, widen(v));
    }
    if (fusion.materialized.has(n.id)) {
      const base = value.get(`${n.id}@${kernelOf[n.id] >= 0 ? kernelOf[n.id] : STORED}`)!;
      stored[n.id] = s.narrowed.has(n.id) || s.lowWeights.has(n.id)
        ? out.add("cast", [out.add("cast", [base], { to: s.low }, undefined, n.loc)], { to: "f32" })
        : base;
    }
  }
  for (const [name, id] of g.outputs) out.setOutput(name, stored[id]);
  return out;
}
