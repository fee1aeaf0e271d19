/**
 * Attention as a custom fusion (flash-style): where nothing else reads the scores, the probabilities or the
 * softmax's row statistics (inference), the three kernels of self-attention (S = Q·Kᵀ, the softmax row
 * kernel, O = P·V) merge into one of kind "attention" (compiler/lower/attention_template.ts) that writes
 * only O. The attentions are the decomposition's node groups, never matched; the kernels holding their GEMMs
 * and softmax merge, with whatever fusion put into them, and each records a decision with its reason (the
 * conditions: DESIGN.md, notes: compiler/fusion/attention.ts).
 */
import { type Graph, type NodeGroup, type NodeId, sameShape } from "../../ir/mod.ts";
import { readsOf, reductionStages } from "./kernel_facts.ts";
import type { FusedKernel, FusionDecision, FusionResult } from "./types.ts";
import { usersOf } from "../graph/users.ts";

/** Threads per workgroup of the attention kernel (see attention_template.ts for why so few). */
export const ATTENTION_WORKGROUP = 16;
/** WebGPU's guaranteed maxComputeWorkgroupStorageSize, in bytes. */
export const ATTENTION_MAX_SHARED_BYTES = 16384;

const PROBS_READ = "attention: the probabilities are read by another kernel (the backward pass)";
const isReduceOp = (op: string) => op === "reduce_sum" || op === "reduce_max";

/** The three kernels of one attention and the nodes the lowering builds around. */
interface Match {
  readonly qk: number;
  readonly sm: number;
  readonly pv: number;
  /** The softmax kernel's main root: the probabilities PV reads. */
  readonly probs: NodeId;
}

/** Most query rows a workgroup takes (its accumulators are R per thread). */
export const ATTENTION_MAX_ROWS = 16;

/**
 * Workgroup memory of the attention kernel with R rows per workgroup, in bytes: the rows' scores, the
 * query rows (the same array later holds the reductions' partials), and the row statistics.
 */
export function attentionSharedBytes(
  rows: number,
  keys: number,
  headDim: number,
  reductions: number,
  widestStage: number,
): number {
  return 4 * (rows * keys + Math.max(rows * headDim, widestStage * ATTENTION_WORKGROUP) + reductions * rows);
}

/**
 * Query rows a workgroup can hold: the largest power of two up to ATTENTION_MAX_ROWS whose scores, query
 * rows and statistics fit workgroup memory; 0 when not even one row fits.
 */
export function attentionRowsFit(
  keys: number,
  headDim: number,
  reductions: number,
  widestStage: number,
): number {
  for (let r = ATTENTION_MAX_ROWS; r >= 1; r /= 2) {
    if (attentionSharedBytes(r, keys, headDim, reductions, widestStage) <= ATTENTION_MAX_SHARED_BYTES) {
      return r;
    }
  }
  return 0;
}

/** Query rows per workgroup: as many as fit, but no more than the rows of one (batch, head) need. */
export function attentionRows(
  rowsPerBatch: number,
  keys: number,
  headDim: number,
  reductions: number,
  widestStage: number,
): number {
  let need = 1;
  while (need < rowsPerBatch) need *= 2;
  return Math.min(need, attentionRowsFit(keys, headDim, reductions, widestStage));
}

/**
 * Where the fused kernel pays: when at least ATTENTION_MIN_ROWS query rows fit a workgroup, so each load
 * of K and V serves that many rows. Measured on lavapipe (2 cores), fused time / three-kernel time,
 * same run, f32, no dropout (`deno run -A bench/attention.ts`, bench/results/
 * 2026-11-21-attention-lavapipe-dev2core.json; b×heads×S×dh: rows per workgroup → ratio):
 *
 *   4×2×64×64: 16 → 0.79    4×2×128×64: 16 → 0.53    4×12×128×64: 16 → 0.45
 *   2×12×384×64: 8 → 0.71   1×12×512×64: 4 → 0.99 (refused)
 *
 * (fp16 GEMM operands: 0.79, 0.57, 0.50 at the first three, 0.49 at 8×12×128×64.) Longer rows leave
 * fewer rows per workgroup (the scores of all of them stay in 16 KiB), and at 4 the saved traffic no
 * longer pays for the lost reuse. The rule depends on shapes only, so compiled output never depends on
 * the device.
 */
export const ATTENTION_MIN_ROWS = 8;
export function attentionPays(rowsFit: number, keys: number, headDim: number): string | undefined {
  if (rowsFit >= ATTENTION_MIN_ROWS) return undefined;
  return `attention: with ${keys} keys and head dim ${headDim} only ${rowsFit} query rows fit a workgroup (under ${ATTENTION_MIN_ROWS}, measured no faster than three kernels)`;
}

/**
 * Follows `id` back through casts computed in `k` or folded into its loads (views) to the node the
 * chain starts from.
 */
function throughCasts(g: Graph, r: FusionResult, k: FusedKernel, id: NodeId): NodeId {
  let x = id;
  const folded = (y: NodeId) => k.members.has(y) || (r.kernelOf[y] < 0 && !r.materialized.has(y));
  while (folded(x) && (g.nodes[x].op === "cast" || g.nodes[x].op === "stop_gradient")) {
    x = g.nodes[x].inputs[0];
  }
  return x;
}

/**
 * The three kernels of the attention that decomposed into node group `site` (compiler/passes/decompose.ts),
 * or (a softmax split over a row kernel and a loop kernel, as in training graphs, where the backward pass
 * reads its pieces) the split; undefined where fusion did not leave its GEMMs in kernels of their own.
 */
function match(
  g: Graph,
  r: FusionResult,
  site: NodeGroup,
  users: NodeId[][],
): Match | { probs: NodeId; split: true } | undefined {
  const kernels = r.kernels, { qk, pv, rmax, rsum } = site.roles;
  if ([qk, pv, rmax, rsum].includes(undefined!)) return undefined;
  const [qkIdx, pvIdx] = [r.kernelOf[qk], r.kernelOf[pv]];
  if (qkIdx < 0 || pvIdx < 0 || qkIdx === pvIdx) return undefined;
  if (kernels[qkIdx].anchor !== qk || kernels[pvIdx].anchor !== pv) return undefined;
  const probs = throughCasts(g, r, kernels[pvIdx], g.nodes[pv].inputs[0]);
  const smIdx = r.kernelOf[probs], sm = kernels[smIdx];
  if (smIdx < 0 || !r.materialized.has(probs) || !sameShape(g.nodes[probs].type.shape, sm.space)) {
    return undefined;
  }
  if (r.kernelOf[rmax] !== smIdx || r.kernelOf[rsum] !== smIdx) return { probs, split: true };
  if (sm.kind !== "reduce" || sm.axes?.length !== 1 || sm.axes[0] !== sm.space.length - 1) return undefined;
  // What the three kernels compute from the scores is the attention's own (the template lowers just that).
  const own = new Set(site.nodes), inside = (x: NodeId) => [qkIdx, smIdx, pvIdx].includes(r.kernelOf[x]);
  const stack = [qk], seen = new Set(stack);
  while (stack.length) {
    for (const u of users[stack.pop()!]) {
      if (!inside(u) || seen.has(u) || u === pv) continue;
      if (!own.has(u)) return undefined;
      seen.add(u);
      if (!isReduceOp(g.nodes[u].op)) stack.push(u); // a reduction's result is a row statistic
    }
  }
  return { qk: qkIdx, sm: smIdx, pv: pvIdx, probs };
}

/** Why the matched attention may not be fused, or undefined when it may. */
function refusal(
  g: Graph,
  r: FusionResult,
  m: Match,
  readers: Map<NodeId, Set<number>>,
  outputs: ReadonlySet<NodeId>,
  always: boolean,
): string | undefined {
  const [qk, sm] = [r.kernels[m.qk], r.kernels[m.sm]];
  const readElsewhere = (x: NodeId, allowed: number) =>
    outputs.has(x) || [...(readers.get(x) ?? [])].some((k) => k !== allowed);
  if (readElsewhere(m.probs, m.pv)) {
    return PROBS_READ;
  }
  if (sm.roots.some((x) => x !== m.probs)) {
    return "attention: the softmax also writes values another kernel reads (its row statistics)";
  }
  if (qk.roots.some((x) => readElsewhere(x, m.sm))) {
    return "attention: the scores are read by another kernel";
  }
  const qkMm = g.nodes[qk.anchor!];
  const qShape = g.nodes[qkMm.inputs[0]].type.shape;
  const rank = qShape.length;
  const headDim = qkMm.attrs.transpose_a ? qShape[rank - 2] : qShape[rank - 1];
  const keys = sm.space[sm.space.length - 1];
  const stages = reductionStages(g, sm);
  const widest = Math.max(1, ...stages.map((s) => s.length));
  const fit = attentionRowsFit(keys, headDim, stages.flat().length, widest);
  if (fit === 0) {
    const bytes = attentionSharedBytes(1, keys, headDim, stages.flat().length, widest);
    return `attention: ${keys} keys and head dim ${headDim} need ${bytes} bytes of workgroup memory (limit ${ATTENTION_MAX_SHARED_BYTES})`;
  }
  return always ? undefined : attentionPays(fit, keys, headDim);
}

/**
 * Merges each attention's three kernels into one kernel of kind "attention" where allowed, recording
 * a decision for every attention found. Returns `r` itself when nothing merged.
 */
export function fuseAttention(
  g: Graph,
  r: FusionResult,
  opts: { takeFuel?: () => boolean; log?: (msg: string) => void; always?: boolean } = {},
): FusionResult {
  const { takeFuel, log } = opts;
  const users = usersOf(g);
  const outputs = new Set(g.outputs.values());
  const readers = new Map<NodeId, Set<number>>();
  r.kernels.forEach((k, i) => {
    for (const x of readsOf(g, r, k)) {
      let s = readers.get(x);
      if (!s) readers.set(x, s = new Set());
      s.add(i);
    }
  });
  const decisions: FusionDecision[] = [...r.decisions];
  /** Kernel index -> the kernel it merged into (-1: kept as is). */
  const mergedInto = new Int32Array(r.kernels.length).fill(-1);
  const merged = new Map<number, FusedKernel>();
  let fuelRefusals = r.fuelRefusals;
  // The attentions the decomposition named, in the order of their P·V kernels.
  const pvKernel = (x: NodeGroup) => r.kernelOf[x.roles.pv] ?? -1;
  const sites = g.groups.filter((x) => x.kind === "attention" && pvKernel(x) >= 0);
  for (const site of sites.sort((x, y) => pvKernel(x) - pvKernel(y))) {
    const i = pvKernel(site), m = match(g, r, site, users);
    if (!m) continue;
    if ("split" in m) {
      const reason = outputs.has(m.probs) || [...(readers.get(m.probs) ?? [])].some((k) => k !== i)
        ? PROBS_READ
        : "attention: the softmax is split over two kernels (another kernel reads its row statistics)";
      decisions.push({ producer: m.probs, consumerKernel: i, ok: false, reason });
      log?.(`fusion: attention ending at %${r.kernels[i].anchor}: no: ${reason}`);
      continue;
    }
    if (mergedInto[m.qk] >= 0 || mergedInto[m.sm] >= 0) continue;
    let reason = refusal(g, r, m, readers, outputs, opts.always ?? false);
    if (reason === undefined && takeFuel && !takeFuel()) {
      reason = "FUSION_FUEL is spent";
      fuelRefusals++;
    }
    decisions.push({
      producer: m.probs,
      consumerKernel: m.pv,
      ok: reason === undefined,
      reason: reason ?? "",
    });
    const pvMm = r.kernels[m.pv].anchor!;
    log?.(
      `fusion: attention ending at %${pvMm}${g.nodes[pvMm].loc ? ` (${g.nodes[pvMm].loc})` : ""}: ${
        reason === undefined ? "yes" : `no: ${reason}`
      }`,
    );
    if (reason !== undefined) continue;
    const [qk, sm, pv] = [r.kernels[m.qk], r.kernels[m.sm], r.kernels[m.pv]];
    merged.set(m.pv, {
      id: pv.id,
      kind: "attention",
      roots: [...pv.roots],
      members: new Set([...qk.members, ...sm.members, ...pv.members]),
      space: sm.space,
      axes: sm.axes,
      anchor: pv.anchor,
    });
    mergedInto[m.qk] = m.pv;
    mergedInto[m.sm] = m.pv;
  }
  if (merged.size === 0) {
    return decisions.length === r.decisions.length ? r : { ...r, decisions, fuelRefusals };
  }
  // The merged kernel takes the PV kernel's place in the schedule: it reads only what the three read,
  // all written before the first of them.
  const renumber = new Int32Array(r.kernels.length);
  const kernels: FusedKernel[] = [];
  r.kernels.forEach((k, i) => {
    if (mergedInto[i] >= 0) return;
    renumber[i] = kernels.length;
    kernels.push({ ...(merged.get(i) ?? k), id: kernels.length });
  });
  r.kernels.forEach((_, i) => {
    if (mergedInto[i] >= 0) renumber[i] = renumber[mergedInto[i]];
  });
  const kernelOf = new Int32Array(r.kernelOf.length).fill(-1);
  for (const k of kernels) for (const x of k.members) kernelOf[x] = k.id;
  const materialized = new Set<NodeId>();
  for (const x of r.materialized) {
    const k = r.kernelOf[x];
    if (k < 0 || mergedInto[k] < 0) materialized.add(x); // the scores and probabilities stay on chip
  }
  return {
    kernels,
    kernelOf,
    materialized,
    decisions: decisions.map((d) => ({ ...d, consumerKernel: renumber[d.consumerKernel] })),
    fuelRefusals,
    inPlace: r.inPlace,
  };
}
