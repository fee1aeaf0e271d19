/**
 * The self-attentions of a training graph that the flash-attention kernels (cuda_flash.ts) can compute, read
 * from their node groups (the attention op's decomposition, forward and backward) on the graph before fusion.
 * Each site lists every node the flash kernels compute, so the flash stage can check that nothing else reads
 * them; O and the gradients are stored where their chain of views ends, and `headsOfProduct` says how to read
 * Q, K, V or dO from their GEMM's token-major product (DESIGN.md, notes: compiler/passes/flash_match.ts).
 */
import type { Graph, Node, NodeGroup, NodeId } from "../../ir/mod.ts";
import { contiguousView, reshapeView, type View } from "../graph/strided_view.ts";
import { usersOf } from "../graph/users.ts";

/** The head dim the flash kernels are written for. */
export const FLASH_HEAD_DIM = 64;

/**
 * An f16 operand [B, H, S, 64] in memory: element (b, h, s, d) at offset + b·batch + h·head + s·row + d.
 * With `bias` (Q, K and V only), the value is f16(f32(element) + bias[offset + h·head + d]) instead: a
 * projection's bias added on load to its f16 product read token-major, rounded as the graph's
 * f16(product + bias) is (compiler/stages/flash_attention.ts), so no kernel writes the biased heads.
 */
export interface FlashOperand {
  readonly offset: number;
  readonly batch: number;
  readonly head: number;
  readonly row: number;
  readonly bias?: FlashBias;
}

/** A bias vector over the heads' columns: element (h, d) at offset + h·head + d, of type dtype. */
export interface FlashBias {
  readonly offset: number;
  readonly head: number;
  readonly dtype: "f16" | "f32";
}

export interface FlashAttentionSpec {
  readonly batch: number;
  readonly heads: number;
  /** Query and key sequence lengths. */
  readonly seqQ: number;
  readonly seqK: number;
  /** Multiplies Q·Kᵀ before the mask is added. */
  readonly scale: number;
  readonly q: FlashOperand;
  readonly k: FlashOperand;
  readonly v: FlashOperand;
  /** O (forward output, backward input) and dO (backward). */
  readonly o: FlashOperand;
  readonly dO?: FlashOperand;
  /** The additive mask per key: f32, element (b, j) at offset + b·batch + j. */
  readonly mask?: {
    readonly offset: number;
    readonly batch: number;
    /**
     * An i32 mask computed on load as (f32(m) - sub)·mul, BERT's (m - 1)·10000 from the 0/1 attention
     * mask (models/bert.ts), in the graph's order of operations; absent: the buffer holds f32 values.
     */
    readonly fromInt?: { readonly sub: number; readonly mul: number };
  };
  /** Dropout of the probabilities: drop probability and the random_uniform's stream; seed and step are read from a u32[2] binding. */
  readonly dropout?: { readonly p: number; readonly stream: number };
  /** Type of the stored results (O forward; dQ, dK, dV backward); L is always f32. */
  readonly out: "f16" | "f32";
  /** Gradient outputs [B, H, S, 64]: layouts of dQ, dK, dV (backward). */
  readonly dQ?: FlashOperand;
  readonly dK?: FlashOperand;
  readonly dV?: FlashOperand;
}

export interface FlashSite {
  readonly spec: FlashAttentionSpec;
  /** Materialized nodes the kernels bind: inputs (q, k, v, dO, mask, rng) and results (o, dQ, dK, dV). */
  readonly q: NodeId;
  readonly k: NodeId;
  readonly v: NodeId;
  readonly dO: NodeId;
  readonly mask?: NodeId;
  readonly rng?: NodeId;
  readonly o: NodeId;
  readonly dQ: NodeId;
  readonly dK: NodeId;
  readonly dV: NodeId;
  /** Bias vectors the kernels add to Q, K and V on load (spec.q.bias etc.; set by the flash stage). */
  readonly qBias?: NodeId;
  readonly kBias?: NodeId;
  readonly vBias?: NodeId;
  /** The forward's computed nodes (scores to O's stored view) and the backward's (dP_d to the gradients'). */
  readonly forward: ReadonlySet<NodeId>;
  readonly backward: ReadonlySet<NodeId>;
  /** Nodes a replaced kernel may also compute inline: constants, the mask's arithmetic, broadcasts. */
  readonly inline: ReadonlySet<NodeId>;
}

/** The graph before fusion; `materialized`: the values stored whatever fusion decides (inputs, params). */
export interface MatchContext {
  readonly graph: Graph;
  readonly materialized: (id: NodeId) => boolean;
}

type Why = string;
const fail = (why: Why): { why: Why } => ({ why });

const contiguous = (shape: readonly number[]) => [...contiguousView(shape).strides];

/**
 * Walks the single-user chain of permutes, reshapes and exact casts from `m` (an f16 GEMM result) to the
 * node the flash kernel stores (where the chain ends) and gives m's strides in that node's buffer
 * (undefined where a reshape follows a permute that broke contiguity).
 */
function storedView(
  c: MatchContext,
  users: NodeId[][],
  m: NodeId,
): { root: NodeId; strides: number[]; chain: NodeId[] } | undefined {
  const chain = [m];
  let at = m;
  while (users[at].length === 1) {
    const n = c.graph.nodes[users[at][0]];
    // A cast to f32 or back to f16 keeps an f16 result's value exactly (mixed precision's f32 views).
    const exactCast = n.op === "cast" && ["f16", "f32"].includes(n.type.dtype);
    if (n.op !== "permute" && n.op !== "reshape" && !exactCast) break;
    chain.push(n.id);
    at = n.id;
  }
  let strides = contiguous(c.graph.nodes[at].type.shape);
  for (let i = chain.length - 1; i > 0; i--) {
    const x = c.graph.nodes[chain[i]];
    const y = c.graph.nodes[chain[i - 1]];
    if (x.op === "permute") {
      const perm = x.attrs.perm as number[];
      const sy = new Array<number>(perm.length);
      perm.forEach((p, k) => (sy[p] = strides[k]));
      strides = sy;
    } else if (x.op === "reshape") {
      // A reshape keeps the element order: only a contiguous view reshapes to a contiguous view.
      if (contiguous(x.type.shape).some((s, k) => s !== strides[k])) return undefined;
      strides = contiguous(y.type.shape);
    }
  }
  return { root: at, strides, chain };
}

const operandOf = (strides: readonly number[]): FlashOperand | undefined =>
  strides[3] === 1 ? { offset: 0, batch: strides[0], head: strides[1], row: strides[2] } : undefined;

/** Every flash-attention site of a training graph, or why an attention is not one (DEBUG logs). */
export function findFlashSites(c: MatchContext): { sites: FlashSite[]; refused: string[] } {
  const g = c.graph, users = usersOf(g);
  const sites: FlashSite[] = [], refused: string[] = [];
  const attentions = g.groups.filter((x) => x.kind === "attention" && x.roles.pv !== undefined);
  for (const site of attentions.sort((x, y) => x.roles.pv - y.roles.pv)) {
    const r = matchSite(c, users, site);
    if ("why" in r) refused.push(`%${site.roles.pv}: ${r.why}`);
    else sites.push(r);
  }
  return { sites, refused };
}

/**
 * The flash site of an attention's node group (compiler/passes/decompose.ts): what the kernels replace is
 * the group's nodes but its constants (computed inline) and what Q, K and V are computed from.
 */
function matchSite(c: MatchContext, users: NodeId[][], site: NodeGroup): FlashSite | { why: Why } {
  const g = c.graph, node = (id: NodeId) => g.nodes[id];
  const op = (id: NodeId, name: string) => node(id).op === name;
  const constOf = (id: NodeId) => (op(id, "const") ? (node(id).attrs.value as number) : undefined);
  const tr = (m: Node) => [!!m.attrs.transpose_a, !!m.attrs.transpose_b].join();
  const { qk, pv, z, dq, dk, dv } = site.roles;
  if ([qk, pv, z].includes(undefined!)) return fail("the decomposition's nodes were simplified away");
  if (dq === undefined || dk === undefined || dv === undefined) return fail("no backward (inference)");
  const [qId, kId] = node(qk).inputs, vId = node(pv).inputs[1];
  // The gradients' GEMMs: under mixed precision each result is its f16 product cast to f32.
  const gemm = (id: NodeId) => {
    while (op(id, "cast")) id = node(id).inputs[0];
    return id;
  };
  const [dqm, dkm, dvm] = [gemm(dq), gemm(dk), gemm(dv)];
  if (tr(node(dqm)) !== "false,false" || tr(node(dkm)) !== "true,false" || tr(node(dvm)) !== "true,false") {
    return fail("the gradients are not GEMMs");
  }
  const dO = node(dvm).inputs[1], dS = node(dqm).inputs[0];
  // Q, K, V, dO and what they are computed from are the flash kernels' inputs, not theirs.
  const operands = new Set<NodeId>(), grown = [qId, kId, vId, dO];
  const own = new Set(site.nodes);
  while (grown.length) {
    const x = grown.pop()!;
    if (operands.has(x)) continue;
    operands.add(x);
    for (const i of node(x).inputs) if (own.has(i)) grown.push(i);
  }
  const forward = new Set<NodeId>(), inline = new Set<NodeId>();
  // The forward's nodes come before P·V (its operands), the gradients' after it (they read dO).
  for (const x of site.nodes) {
    if (op(x, "const")) inline.add(x);
    else if (!operands.has(x) && x <= pv) forward.add(x);
  }
  const u = [...forward].find((x) => op(x, "random_uniform"));
  const rng = u === undefined ? undefined : node(u).inputs[0];
  const p = site.attrs.dropout as number, scale = site.attrs.scale as number;
  const dropout = p > 0 ? { p, stream: site.attrs.stream as number } : undefined;
  if (p > 0 && rng === undefined) return fail("the dropout's random numbers were simplified away");
  // Z = scaled scores + broadcast key mask.
  let mask: NodeId | undefined, maskSpec: FlashAttentionSpec["mask"];
  if (op(z, "add")) {
    const [a, b] = node(z).inputs;
    const bc = op(b, "broadcast") ? b : a;
    if (!op(bc, "broadcast")) return fail("the scores' addend is not a broadcast mask");
    const m = node(bc).inputs[0], ms = node(m).type.shape;
    const [bb, , sq] = node(z).type.shape;
    if (ms.length !== 4 || ms[0] !== bb || ms[1] !== 1 || ms[2] !== 1) return fail("the mask is not per key");
    forward.add(z);
    forward.delete(bc);
    inline.add(bc); // one broadcast may serve every layer's scores (CSE)
    if (c.materialized(m) && node(m).type.dtype === "f32") {
      mask = m;
      maskSpec = { offset: 0, batch: ms[3] };
    } else {
      // BERT's (f(m) - 1)·10000 of an i32 [B, S] mask, computed on load in the graph's order.
      const rsh = m, mul = node(rsh).inputs[0];
      const ok = op(rsh, "reshape") && op(mul, "mul") && op(node(mul).inputs[0], "sub");
      const subN = ok ? node(mul).inputs[0] : -1;
      const castN = ok ? node(subN).inputs[0] : -1;
      const sv = ok ? constOf(node(subN).inputs[1]) : undefined;
      const mv = ok ? constOf(node(mul).inputs[1]) : undefined;
      const src = ok && op(castN, "cast") ? node(castN).inputs[0] : -1;
      if (
        src < 0 || sv === undefined || mv === undefined || !c.materialized(src) ||
        node(src).type.dtype !== "i32"
      ) {
        return fail("the mask is neither an f32 buffer nor (i32 mask - c)·c'");
      }
      mask = src;
      maskSpec = { offset: 0, batch: sq, fromInt: { sub: sv, mul: mv } };
      for (const x of [rsh, mul, subN, castN, node(subN).inputs[1], node(mul).inputs[1]]) inline.add(x);
    }
  }
  const [B, H, S, D] = node(qId).type.shape;
  for (const x of [qId, kId, vId]) {
    const sh = node(x).type.shape;
    if (sh.length !== 4 || sh.join() !== [B, H, S, D].join()) return fail("Q, K, V shapes differ");
    if (node(x).type.dtype !== "f16") return fail("Q, K, V are not f16");
  }
  if (D !== FLASH_HEAD_DIM) return fail(`head dim ${D}, not ${FLASH_HEAD_DIM}`);
  // Backward: dP_d = dO·Vᵀ and dV = P_dᵀ·dO with one dO; dQ = dS·K and dK = dSᵀ·Q with one dS.
  const pd = node(pv).inputs[0];
  const dpd = site.nodes.find((x) => op(x, "matmul") && node(x).inputs.join() === [dO, vId].join());
  if (dpd === undefined || node(dvm).inputs[0] !== pd || node(dkm).inputs.join() !== [dS, qId].join()) {
    return fail("no dP GEMM, or the gradients' GEMMs read other values");
  }
  if (node(dO).type.dtype !== "f16" || node(dO).type.shape.join() !== [B, H, S, D].join()) {
    return fail("dO is not an f16 [B, H, S, 64] value");
  }
  // The softmax backward: every node between dP_d (and the forward's values) and dS.
  const backward = new Set<NodeId>([dvm, dpd, dqm, dkm]);
  const stack = [dS];
  while (stack.length) {
    const x = stack.pop()!;
    if (backward.has(x) || forward.has(x) || inline.has(x)) continue;
    if (op(x, "const")) {
      inline.add(x);
      continue;
    }
    if (node(x).inputs.length === 0) return fail(`dS depends on %${x} (${node(x).op})`);
    backward.add(x);
    stack.push(...node(x).inputs);
  }
  const views = [];
  for (const m of [pv, dqm, dkm, dvm]) {
    const view = storedView(c, users, m);
    const o = view && operandOf(view.strides);
    if (!view || !o || node(m).type.dtype !== "f16") {
      return fail(`%${m} is not stored as f16 rows`);
    }
    for (const x of view.chain) (m === pv ? forward : backward).add(x);
    views.push({ root: view.root, operand: o });
  }
  const plain = (x: NodeId): FlashOperand => {
    const st = contiguous(node(x).type.shape);
    return { offset: 0, batch: st[0], head: st[1], row: st[2] };
  };
  const spec: FlashAttentionSpec = {
    batch: B,
    heads: H,
    seqQ: S,
    seqK: S,
    scale,
    q: plain(qId),
    k: plain(kId),
    v: plain(vId),
    o: views[0].operand,
    dO: plain(dO),
    ...(maskSpec ? { mask: maskSpec } : {}),
    ...(dropout ? { dropout } : {}),
    out: "f16",
    dQ: views[1].operand,
    dK: views[2].operand,
    dV: views[3].operand,
  };
  return {
    spec,
    q: qId,
    k: kId,
    v: vId,
    dO,
    ...(mask !== undefined ? { mask } : {}),
    ...(rng !== undefined ? { rng } : {}),
    o: views[0].root,
    dQ: views[1].root,
    dK: views[2].root,
    dV: views[3].root,
    forward,
    backward,
    inline,
  };
}

/** How heads-major `root` is read from the product of `anchor` (see headsOfProduct). */
export interface ProductHeads {
  /** Root's elements in the product's buffer (a [.., H·64] row per token): offset 0 and its strides. */
  readonly operand: FlashOperand;
  /** The materialized bias vector added before the rounding, and its stored dtype. */
  readonly bias?: { readonly node: NodeId; readonly dtype: "f16" | "f32" };
  /** The nodes after the anchor up to the root, and the bias's path to its buffer: computed on load. */
  readonly chain: readonly NodeId[];
}

/**
 * How `root` (an f16 [B, H, S, 64] heads-major value) is the f16 product of the matmul `anchor`, read
 * through reshapes and a permute, with at most one bias vector added before the rounding: the nodes
 * from the anchor to the root are value-keeping casts (to f16 or f32), reshapes and permutes, and one
 * `add` of a materialized f16/f32 vector over the product's columns broadcast to every row, in the
 * product's coordinates (no reshape or permute between it and the anchor). The value of root element
 * (b, h, s, d) is then f16(f32(product at the operand's offset) + bias[h·64 + d]), the one rounding the
 * graph makes (after the add or at the store). Each node on the way has one user. Why not, otherwise.
 */
export function headsOfProduct(
  c: MatchContext,
  users: NodeId[][],
  anchor: NodeId,
  root: NodeId,
): ProductHeads | string {
  const g = c.graph, node = (id: NodeId) => g.nodes[id];
  const mm = node(anchor);
  if (mm.op !== "matmul" || mm.type.dtype !== "f16") {
    return `%${anchor} is not an f16 matmul product`;
  }
  const cols = mm.type.shape[mm.type.shape.length - 1];
  const chain: NodeId[] = [], biasPath: NodeId[] = [];
  let bias: ProductHeads["bias"];
  let cur = root, added = false;
  const isCast = (id: NodeId) =>
    node(id).op === "cast" && ["f16", "f32"].includes(node(id).type.dtype) &&
    ["f16", "f32"].includes(node(node(id).inputs[0]).type.dtype);
  while (cur !== anchor) {
    const n = node(cur);
    chain.push(cur);
    if (cur !== root && users[cur].length !== 1) return `%${cur} has other readers`;
    if (n.op === "add" && !added) {
      // The side that reaches the anchor through casts only; the other is the bias.
      const strip = (id: NodeId) => {
        while (id !== anchor && isCast(id)) id = node(id).inputs[0];
        return id;
      };
      const [x, y] = n.inputs;
      const [on, other] = strip(x) === anchor ? [x, y] : strip(y) === anchor ? [y, x] : [-1, -1];
      if (on < 0 || strip(other) === anchor) return `%${cur} adds something other than a bias`;
      const b = biasOf(c, other, n.type.shape, cols);
      if (typeof b === "string") return b;
      biasPath.push(...b.path);
      bias = { node: b.node, dtype: b.dtype };
      added = true;
      cur = on;
      continue;
    }
    const moves = n.op === "reshape" || n.op === "permute";
    // Below the add the values are the product's own, in its coordinates.
    if (moves && added) return `a ${n.op} between %${anchor} and its bias`;
    if (!moves && !isCast(cur)) return `%${cur} (${n.op}) is not a cast, reshape or permute`;
    cur = n.inputs[0];
  }
  if (users[anchor].length !== 1) return `%${anchor} has other readers`;
  // The root's strides in the product's buffer: the chain's views, from the product up.
  let view: View | undefined = contiguousView(mm.type.shape);
  for (const id of [...chain].reverse()) {
    const n = node(id);
    if (n.op === "reshape") view = view && reshapeView(view, n.type.shape);
    else if (n.op === "permute") {
      const perm = n.attrs.perm as number[], v = view;
      view = v && { shape: n.type.shape, strides: perm.map((p) => v.strides[p]), offset: v.offset };
    }
  }
  const shape = node(root).type.shape;
  if (!view || view.shape.join() !== shape.join() || shape.length !== 4 || shape[3] !== FLASH_HEAD_DIM) {
    return `%${root} is not a strided [B, H, S, 64] view of %${anchor}`;
  }
  const o = operandOf(view.strides);
  if (!o) return `%${root}'s head dim is not contiguous in %${anchor}`;
  // The bias's column for head h is h·64 + d exactly when the head dim and the heads are the product's
  // columns in that order: h's stride 64, d's 1, within a row.
  if (bias && (o.head !== FLASH_HEAD_DIM || shape[1] * FLASH_HEAD_DIM !== cols)) {
    return `%${root}'s heads are not the product's columns in order`;
  }
  return { operand: o, ...(bias ? { bias } : {}), chain: [...chain, ...biasPath] };
}

/**
 * The bias of an add of shape `shape`: `id` is a materialized f16/f32 vector of `cols` elements read
 * through value-keeping casts, reshapes between shapes [1, …, 1, cols], and one broadcast to `shape`
 * (the vector along the last axis). Its nodes (`path`) are computed on load.
 */
function biasOf(
  c: MatchContext,
  id: NodeId,
  shape: readonly number[],
  cols: number,
): { node: NodeId; dtype: "f16" | "f32"; path: NodeId[] } | string {
  const g = c.graph, node = (x: NodeId) => g.nodes[x];
  const vector = (s: readonly number[]) => s[s.length - 1] === cols && s.slice(0, -1).every((d) => d === 1);
  const path: NodeId[] = [];
  let cur = id, broadcast = false;
  while (!c.materialized(cur)) {
    const n = node(cur);
    path.push(cur);
    const from = node(n.inputs[0]);
    if (
      n.op === "broadcast" && !broadcast && n.type.shape.join() === shape.join() && vector(from.type.shape)
    ) {
      broadcast = true;
    } else if (n.op === "reshape" && broadcast && vector(n.type.shape) && vector(from.type.shape)) {
      // a vector reshaped
    } else if (
      n.op === "cast" && (n.type.dtype === "f32" || n.type.dtype === from.type.dtype) &&
      ["f16", "f32"].includes(from.type.dtype)
    ) {
      // widening, or the value's own dtype: exact
    } else {
      return `the bias %${id} is not a vector broadcast over the rows (%${cur} ${n.op})`;
    }
    cur = n.inputs[0];
  }
  const dtype = node(cur).type.dtype;
  if (!broadcast || !vector(node(cur).type.shape) || (dtype !== "f16" && dtype !== "f32")) {
    return `the bias %${id} is not an f16/f32 vector of ${cols} broadcast over the rows`;
  }
  // A cast on the way that narrows the stored value (an f32 buffer read as f16) would round it.
  if (path.some((x) => node(x).op === "cast" && node(x).type.dtype === "f16") && dtype !== "f16") {
    return `the bias %${id} is rounded to f16 on load`;
  }
  return { node: cur, dtype, path };
}
