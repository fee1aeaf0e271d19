/**
 * The optimizer step as graph nodes, appended to a differentiated training graph: LAMB or AdamW over every
 * parameter at once, with dynamic loss scaling, global gradient-norm clipping, the learning-rate schedule
 * and gradient accumulation — all on the device, so a step needs no round trip to the host (the host reads
 * `train.state` only when it logs). It works on flat vectors (flat_layout.ts), so fusion makes the whole
 * update a handful of kernels. The math, per step: DESIGN.md, notes: optimizer/update.ts.
 */
import type { Graph, NodeId } from "../ir/mod.ts";
import { GraphEditor } from "../compiler/graph/edit.ts";
import { UPDATE_PREFIX } from "../plan/plan.ts";
import { GRAD_PREFIX } from "../compiler/training_graph/autodiff.ts";
import { type FlatLayout, flatLayout, groupSegments } from "./flat_layout.ts";

export type OptimizerKind = "lamb" | "adamw";

export interface OptimizerOptions {
  readonly kind: OptimizerKind;
  readonly beta1?: number;
  readonly beta2?: number;
  readonly epsilon?: number;
  readonly weightDecay?: number;
  readonly maxGradNorm?: number;
  /** Dynamic loss scaling (fp16); static keeps train.state's scale as the host set it. */
  readonly dynamicScale?: boolean;
  /** Clean steps before the scale doubles (NVIDIA/apex: 2000). */
  readonly scaleWindow?: number;
  readonly scaleFloor?: number;
  /** Micro-batches per update; above 1 the graph accumulates into train.grad_acc until train.apply is 1. */
  readonly accumulationSteps?: number;
  /**
   * Cut the flat vectors into groups of at most this many bytes (layout.ts): the device's binding limit.
   * Absent: one group, the layout as given. The trainer must build its layout with the same value.
   */
  readonly maxGroupBytes?: number;
}

/** Names of the graph's optimizer inputs and outputs (the runtime and the trainer use them). */
export const OPT = {
  /** f32[STATE_SIZE]: see STATE. */
  state: "train.state",
  /** f32[4]: base learning rate, warmup proportion, total steps, decay degree. */
  hparams: "train.hparams",
  /** i32[tensors, 3]: first chunk, chunk count, weight decay (0/1) per tensor (layoutTables). */
  segments: "train.segments",
  /** i32[chunks]: the tensor each chunk belongs to (layoutTables). */
  chunkSegment: "train.chunk_segment",
  m: "opt.m",
  v: "opt.v",
  /** f32[P]: gradients accumulated over the micro-batches so far (accumulation only). */
  gradAcc: "train.grad_acc",
  /** f32[1]: 1 on the micro-batch that applies the update, 0 on the others (accumulation only). */
  apply: "train.apply",
  /** The flat parameter vector (an output whose buffer holds every parameter). */
  flatParams: "flat.params",
} as const;

/** Slots of train.state. */
export const STATE = {
  /** Updates applied so far (t - 1 during the next step); skipped steps do not count. */
  step: 0,
  lossScale: 1,
  /** Clean (finite) steps since the scale last changed. */
  cleanSteps: 2,
  skippedSteps: 3,
  /** Of the last step: the global norm of the unscaled gradient, the learning rate, 1 if it overflowed. */
  gradNorm: 4,
  learningRate: 5,
  overflow: 6,
  /** Micro-batches accumulated since the last update. */
  micro: 7,
} as const;
export const STATE_SIZE = 8;

/** NVIDIA's BERT pre-training defaults (run_pretraining.py and apex FusedLAMB). */
export const OPTIMIZER_DEFAULTS = {
  beta1: 0.9,
  beta2: 0.999,
  epsilon: 1e-6,
  weightDecay: 0.01,
  maxGradNorm: 1.0,
  scaleWindow: 2000,
  scaleFloor: 1,
} as const;

/**
 * The graph name of one group's flat vector or table (OPT.flatParams, m, v, gradAcc, segments,
 * chunkSegment): the plain name when the layout has one group, so such graphs are unchanged, else
 * `<name>.<group>`. The host reads and writes these through optimizer/feeds.ts.
 */
export function groupName(base: string, layout: FlatLayout, group: number): string {
  return layout.groups.length === 1 ? base : `${base}.${group}`;
}

/** One group's nodes, as the update builds them. */
interface GroupNodes {
  readonly P: number;
  readonly NC: number;
  readonly T: number;
  readonly M: number;
  readonly segTable: NodeId;
  readonly chunkSeg: NodeId;
  readonly m: NodeId;
  readonly v: NodeId;
  w: NodeId;
  grad: NodeId;
  gu: NodeId;
  gSq: NodeId;
  gc: NodeId;
  m1: NodeId;
  v1: NodeId;
  perTensor: (chunkSums: NodeId) => NodeId;
}

/**
 * Appends the optimizer to `g` (which has `grad.<name>` outputs for the layout's parameters) and returns
 * it. Outputs: `flat.params` and `new:flat.params`, `new:opt.m`, `new:opt.v`, `new:train.state`, and with
 * accumulation `new:train.grad_acc` — one of each per group (groupName) when opts.maxGroupBytes cuts the
 * layout into several.
 */
/** The location every op of the optimizer carries (dumps, kernel descriptions, bench:bert's profile split). */
export const OPTIMIZER_LOC = "optimizer/update.ts";

export function appendOptimizer(g: Graph, given: FlatLayout, opts: OptimizerOptions): Graph {
  const o = { ...OPTIMIZER_DEFAULTS, dynamicScale: false, accumulationSteps: 1, ...opts };
  const layout = o.maxGroupBytes === undefined
    ? given
    : flatLayout(given.segments, given.chunk, { maxGroupBytes: o.maxGroupBytes });
  const b = new GraphEditor(g);
  b.loc = OPTIMIZER_LOC;
  const C = layout.chunk;
  const f32 = "f32" as const;
  // An input the graph already has (train.state, read by the loss scaling before autodiff) is reused.
  const input = (name: string, shape: number[], dtype: "f32" | "i32" = f32) =>
    g.sources("input").get(name)?.id ?? g.add("input", [], { name }, { shape, dtype });
  const k = (v: number, shape: readonly number[] = [1]) => b.full(v, shape, f32);
  const op = (name: string, ...xs: NodeId[]) => b.node(name, xs);
  const at = (x: NodeId, shape: readonly number[]) => b.broadcast(x, shape);
  const params = g.sources("param");
  const name = (base: string, gi: number) => groupName(base, layout, gi);
  // Nodes are made in the same order as with one vector, so a one-group graph is the graph it always was.

  // ---- inputs ----
  const state = input(OPT.state, [STATE_SIZE]);
  const hp = input(OPT.hparams, [4]);
  const groups = layout.groups.map((grp, gi): GroupNodes => {
    const P = grp.total, NC = grp.chunks, T = grp.segmentCount;
    const segTable = input(name(OPT.segments, gi), [T, 3], "i32");
    const chunkSeg = input(name(OPT.chunkSegment, gi), [NC], "i32");
    const m = input(name(OPT.m, gi), [P]);
    const v = input(name(OPT.v, gi), [P]);
    const none = -1 as NodeId;
    return {
      P,
      NC,
      T,
      M: grp.maxChunks,
      segTable,
      chunkSeg,
      m,
      v,
      w: none,
      grad: none,
      gu: none,
      gSq: none,
      gc: none,
      m1: none,
      v1: none,
      perTensor: () => none,
    };
  });
  const st = (i: number) => b.slice(state, [i], [i + 1]);
  const hpAt = (i: number) => b.slice(hp, [i], [i + 1]);

  // ---- flat vectors: parameters and gradients, each tensor on a chunk boundary, zeros between ----
  const flat = (gi: number, valueOf: (name: string) => NodeId | undefined): NodeId => {
    const parts: NodeId[] = [];
    for (const s of groupSegments(layout, layout.groups[gi])) {
      const x = valueOf(s.name);
      parts.push(x === undefined ? k(0, [s.size]) : b.reshape(x, [s.size]));
      const pad = s.chunks * C - s.size;
      if (pad > 0) parts.push(k(0, [pad]));
    }
    return b.node("concat", parts, { axis: 0 });
  };
  groups.forEach((gr, gi) => {
    gr.w = flat(gi, (pname) => {
      const p = params.get(pname);
      if (!p) throw new Error(`optimizer: the graph has no parameter '${pname}'`);
      return p.id;
    });
    g.setOutput(name(OPT.flatParams, gi), gr.w);
    gr.grad = flat(gi, (pname) => g.outputs.get(GRAD_PREFIX + pname));
  });

  // ---- accumulation: sum micro-batches until train.apply says to update ----
  let apply: NodeId = k(1);
  if (o.accumulationSteps > 1) {
    groups.forEach((gr, gi) => {
      const acc = input(name(OPT.gradAcc, gi), [gr.P]);
      if (gi === 0) apply = input(OPT.apply, [1]);
      gr.grad = b.add(acc, gr.grad);
      const P = [gr.P];
      g.setOutput(
        UPDATE_PREFIX + name(OPT.gradAcc, gi),
        b.where(b.ge(at(apply, P), k(0.5, P)), k(0, P), gr.grad),
      );
    });
  }
  const applying = b.ge(apply, k(0.5));

  // ---- unscale, global norm (the groups' partial sums), overflow ----
  const scale = st(STATE.lossScale);
  const unscale = op("reciprocal", b.scale(scale, o.accumulationSteps));
  let sumSq: NodeId | undefined;
  for (const gr of groups) {
    const { P, NC, T, M } = gr;
    gr.gu = b.mul(gr.grad, at(unscale, [P]));
    // Per-tensor sums of row sums: row j of tensor s is chunk firstChunk(s) + j, for j < chunks(s).
    const col = (c: number) => b.slice(gr.segTable, [0, c], [T, c + 1]); // [T, 1] i32
    const j = b.node("iota", [], { axis: 1 }, { shape: [T, M], dtype: "i32" });
    // Clamped, so the rows past a tensor's end (masked out below) still index a real chunk.
    const chunkIdx = op("min", b.add(at(col(0), [T, M]), j), b.full(NC - 1, [T, M], "i32"));
    const inTensor = b.lt(j, at(col(1), [T, M]));
    gr.perTensor = (chunkSums: NodeId): NodeId => {
      const picked = b.reshape(b.gather(chunkSums, chunkIdx), [T, M]);
      return b.reshape(b.reduceSum(b.where(inTensor, picked, k(0, [T, M])), [1]), [T]);
    };
    gr.gSq = gr.perTensor(rowSumSq(b, gr.gu, NC, C)); // [T]
    const part = b.reshape(b.reduceSum(gr.gSq, [0]), [1]);
    sumSq = sumSq === undefined ? part : b.add(sumSq, part);
  }
  const gNorm = op("sqrt", sumSq ?? k(0)); // [1]
  // Finite iff not inf and not NaN: a NaN fails every comparison, an inf fails this one.
  const finite = b.le(gNorm, k(3.4028234663852886e38));
  const update = b.node("and", [finite, applying]);

  // ---- clip, moments ----
  const clip = op("max", k(1), b.scale(gNorm, 1 / o.maxGradNorm));
  for (const gr of groups) {
    const P = gr.P;
    gr.gc = b.mul(gr.gu, at(op("reciprocal", clip), [P]));
    gr.m1 = b.add(b.scale(gr.m, o.beta1), b.scale(gr.gc, 1 - o.beta1));
    gr.v1 = b.add(b.scale(gr.v, o.beta2), b.scale(b.mul(gr.gc, gr.gc), 1 - o.beta2));
  }

  // ---- schedule ----
  const t = b.add(st(STATE.step), k(1)); // this update's 1-based count
  const progress = b.div(t, hpAt(2));
  const warm = hpAt(1);
  const decayLeft = op("max", b.sub(k(1), progress), k(0));
  // (1-p)^degree as exp(degree log(1-p)), with 0 at the end of the schedule (no log of zero).
  const poly = b.where(
    b.node("gt", [decayLeft, k(0)]),
    b.exp(b.mul(hpAt(3), op("log", op("max", decayLeft, k(1e-30))))),
    k(0),
  );
  const lr = b.mul(hpAt(0), b.where(b.lt(progress, warm), b.div(progress, op("max", warm, k(1e-30))), poly));

  groups.forEach((gr, gi) => {
    const { P, NC, T } = gr;
    // ---- update direction ----
    const perChunk = (perT: NodeId) => b.reshape(b.gather(b.reshape(perT, [T, 1]), gr.chunkSeg), [NC, 1]);
    const decayT = b.cast(b.reshape(b.slice(gr.segTable, [0, 2], [T, 3]), [T]), f32); // [T] 0/1
    const decayAt = b.reshape(at(perChunk(b.scale(decayT, o.weightDecay)), [NC, C]), [P]);
    let mHat = gr.m1, vHat = gr.v1;
    if (o.kind === "lamb") {
      // Bias correction with b^t = exp(t log b).
      const corr = (beta: number) => op("reciprocal", b.sub(k(1), b.exp(b.scale(t, Math.log(beta)))));
      mHat = b.mul(gr.m1, at(corr(o.beta1), [P]));
      vHat = b.mul(gr.v1, at(corr(o.beta2), [P]));
    }
    const u = b.add(b.div(mHat, b.add(op("sqrt", vHat), k(o.epsilon, [P]))), b.mul(decayAt, gr.w));
    let stepSize = b.reshape(at(lr, [NC, C]), [P]);
    if (o.kind === "lamb") {
      // Per-tensor norms: a tensor lies in one group, so its norms are the group's own.
      const wNorm = op("sqrt", gr.perTensor(rowSumSq(b, gr.w, NC, C)));
      const uNorm = op("sqrt", gr.perTensor(rowSumSq(b, u, NC, C)));
      const zeroT = k(0, [T]);
      const useRatio = b.node("and", [
        b.node("gt", [decayT, zeroT]),
        b.node("and", [b.node("gt", [wNorm, zeroT]), b.node("gt", [uNorm, zeroT])]),
      ]);
      const ratio = b.where(useRatio, b.div(wNorm, op("max", uNorm, k(1e-30, [T]))), k(1, [T]));
      stepSize = b.mul(stepSize, b.reshape(at(perChunk(ratio), [NC, C]), [P]));
    }
    const w1 = b.sub(gr.w, b.mul(stepSize, u));

    // ---- commit, or keep everything as it was (overflow, or a micro-batch that only accumulates) ----
    const updP = at(update, [P]);
    g.setOutput(UPDATE_PREFIX + name(OPT.flatParams, gi), b.where(updP, w1, gr.w));
    g.setOutput(UPDATE_PREFIX + name(OPT.m, gi), b.where(updP, gr.m1, gr.m));
    g.setOutput(UPDATE_PREFIX + name(OPT.v, gi), b.where(updP, gr.v1, gr.v));
  });

  // ---- state ----
  const one = k(1), zero = k(0);
  const overflow = b.node("and", [applying, b.node("not", [finite])]);
  const step1 = b.add(st(STATE.step), b.where(update, one, zero));
  const skipped1 = b.add(st(STATE.skippedSteps), b.where(overflow, one, zero));
  let scale1 = scale, clean1 = st(STATE.cleanSteps);
  if (o.dynamicScale) {
    const clean = b.add(st(STATE.cleanSteps), b.where(update, one, zero));
    const grow = b.ge(clean, k(o.scaleWindow));
    scale1 = b.where(
      overflow,
      op("max", b.scale(scale, 0.5), k(o.scaleFloor)),
      b.where(grow, b.scale(scale, 2), scale),
    );
    clean1 = b.where(b.node("or", [overflow, grow]), zero, clean);
  }
  const micro1 = b.where(applying, zero, b.add(st(STATE.micro), one));
  const lastNorm = b.where(applying, gNorm, st(STATE.gradNorm));
  const lastLr = b.where(applying, lr, st(STATE.learningRate));
  const lastOverflow = b.where(applying, b.where(overflow, one, zero), st(STATE.overflow));
  const slots = new Array<NodeId>(STATE_SIZE);
  slots[STATE.step] = step1;
  slots[STATE.lossScale] = scale1;
  slots[STATE.cleanSteps] = clean1;
  slots[STATE.skippedSteps] = skipped1;
  slots[STATE.gradNorm] = lastNorm;
  slots[STATE.learningRate] = lastLr;
  slots[STATE.overflow] = lastOverflow;
  slots[STATE.micro] = micro1;
  g.setOutput(UPDATE_PREFIX + OPT.state, b.node("concat", slots, { axis: 0 }));
  return g;
}

/** Per-row sums of squares of a flat vector viewed as [NC, C] rows: [NC, 1]. */
function rowSumSq(b: GraphEditor, x: NodeId, NC: number, C: number): NodeId {
  return b.reduceSum(b.reshape(b.mul(x, x), [NC, C]), [1]);
}

/**
 * Adds `scaled_loss` = loss * train.state[lossScale], the value autodiff differentiates under loss
 * scaling (the gradients come out multiplied by the scale; appendOptimizer divides it out).
 */
export function appendScaledLoss(g: Graph, loss = "loss"): string {
  const b = new GraphEditor(g);
  const lossId = g.outputs.get(loss);
  if (lossId === undefined) throw new Error(`loss scaling: the graph has no output '${loss}'`);
  const state = g.sources("input").get(OPT.state)?.id ??
    g.add("input", [], { name: OPT.state }, { shape: [STATE_SIZE], dtype: "f32" });
  const shape = g.nodes[lossId].type.shape;
  const scale = b.reshape(b.slice(state, [STATE.lossScale], [STATE.lossScale + 1]), shape);
  g.setOutput(SCALED_LOSS, b.mul(lossId, scale));
  return SCALED_LOSS;
}

export const SCALED_LOSS = "scaled_loss";
