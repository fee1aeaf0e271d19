/**
 * Finds the self-attentions of a training graph that the flash-attention kernels (cuda_flash.ts) can
 * compute: the forward and backward exactly as dsl/nn.ts and the autodiff build them. Each site lists every
 * node the flash kernels replace, so the flash stage can check that what it drops computes nothing else;
 * operand layouts come from the buffers, and `headsOfProduct` says how to read Q, K, V or dO from their
 * GEMM's token-major product (DESIGN.md, notes: compiler/lower/flash_match.ts).
 */
import type { Graph, Node, NodeId } from "../../ir/mod.ts";
import type { DType } from "../../ir/mod.ts";
import { FLASH_HEAD_DIM, type FlashAttentionSpec, type FlashOperand } from "../codegen/cuda_flash.ts";
import { reshapeView } from "./gemm_library.ts";

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

export interface MatchContext {
  readonly graph: Graph;
  readonly materialized: (id: NodeId) => boolean;
  readonly storedType: (id: NodeId) => DType;
}

type Why = string;
const fail = (why: Why): { why: Why } => ({ why });

/** Users of every node. */
export function usersOf(g: Graph): NodeId[][] {
  const users: NodeId[][] = g.nodes.map(() => []);
  for (const n of g.nodes) for (const i of n.inputs) users[i].push(n.id);
  return users;
}

const contiguous = (shape: readonly number[]) => {
  const st = new Array<number>(shape.length).fill(1);
  for (let i = shape.length - 2; i >= 0; i--) st[i] = st[i + 1] * shape[i + 1];
  return st;
};

/**
 * Walks the single-user chain of permutes, reshapes and exact casts from `m` (an f16 GEMM result) to the
 * first materialized node and gives
 * m's strides in that node's buffer (undefined where a reshape follows a permute that broke contiguity).
 */
function storedView(
  c: MatchContext,
  users: NodeId[][],
  m: NodeId,
): { root: NodeId; strides: number[]; chain: NodeId[] } | undefined {
  const chain = [m];
  let at = m;
  while (!c.materialized(at)) {
    const u = users[at];
    if (u.length !== 1) return undefined;
    const n = c.graph.nodes[u[0]];
    // A cast to f32 or back to f16 keeps an f16 result's value exactly (mixed precision's f32 views).
    const exactCast = n.op === "cast" && ["f16", "f32"].includes(n.type.dtype);
    if (n.op !== "permute" && n.op !== "reshape" && !exactCast) return undefined;
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

/** Every flash-attention site of a training graph, or why a candidate P·V is not one (DEBUG logs). */
export function findFlashSites(c: MatchContext): { sites: FlashSite[]; refused: string[] } {
  const g = c.graph, users = usersOf(g);
  const sites: FlashSite[] = [], refused: string[] = [];
  for (const n of g.nodes) {
    if (n.op !== "matmul" || n.type.shape.length !== 4) continue;
    const r = matchSite(c, users, n);
    if ("why" in r) {
      if (r.why) refused.push(`%${n.id}: ${r.why}`);
    } else sites.push(r);
  }
  return { sites, refused };
}

function matchSite(c: MatchContext, users: NodeId[][], pv: Node): FlashSite | { why: Why } {
  const g = c.graph, node = (id: NodeId) => g.nodes[id];
  const op = (id: NodeId, name: string) => node(id).op === name;
  const constOf = (id: NodeId) => (op(id, "const") ? (node(id).attrs.value as number) : undefined);
  const tr = (m: Node) => [!!m.attrs.transpose_a, !!m.attrs.transpose_b].join();
  // Not a P·V at all: no reason worth logging.
  if (tr(pv) !== "false,false") return fail("");
  const notPV = (what: string) => fail(`not a P·V: ${what}`);
  const [pd, vId] = pv.inputs;
  const forward = new Set<NodeId>([pv.id]);
  const inline = new Set<NodeId>();
  // Dropout: where(u >= p, P·(1/(1-p)), 0).
  // Mixed precision: the probabilities are computed in f32 and cast to f16 for the GEMM.
  const pf = op(pd, "cast") ? node(pd).inputs[0] : pd;
  if (pf !== pd) forward.add(pd);
  let p = pf, dropout: FlashAttentionSpec["dropout"], rng: NodeId | undefined;
  if (op(pf, "where")) {
    const [keep, scaled, zero] = node(pf).inputs;
    if (!op(keep, "ge") || constOf(zero) !== 0 || !op(scaled, "mul")) {
      return notPV("a where that is not dropout");
    }
    const [u, pc] = node(keep).inputs;
    const prob = constOf(pc);
    if (!op(u, "random_uniform") || prob === undefined) return notPV("a where that is not dropout");
    const [pp, zc] = node(scaled).inputs;
    const z = constOf(zc);
    if (z === undefined || Math.abs(z * (1 - prob) - 1) > 1e-3) return fail("dropout's scale is not 1/(1-p)");
    rng = node(u).inputs[0];
    dropout = { p: prob, stream: node(u).attrs.stream as number };
    forward.add(pf).add(keep).add(scaled).add(u);
    inline.add(zero).add(pc).add(zc);
    p = pp;
  }
  // Softmax: div(E, broadcast(reduce_sum(E))), E = exp(Z - broadcast([stop_gradient] reduce_max(Z))).
  if (!op(p, "div")) return notPV(`its left operand is ${node(p).op}, not softmax's div`);
  const [e, rb] = node(p).inputs;
  if (!op(e, "exp") || !op(rb, "broadcast") || !op(node(rb).inputs[0], "reduce_sum")) {
    return notPV("no softmax");
  }
  const rs = node(rb).inputs[0];
  if (node(rs).inputs[0] !== e || !op(node(e).inputs[0], "sub")) return notPV("no softmax");
  const sub = node(e).inputs[0];
  const [z, mb] = node(sub).inputs;
  let mx = op(mb, "broadcast") ? node(mb).inputs[0] : -1;
  const sg = mx;
  if (mx >= 0 && op(mx, "stop_gradient")) mx = node(mx).inputs[0];
  if (mx < 0 || !op(mx, "reduce_max") || node(mx).inputs[0] !== z) return notPV("no softmax");
  forward.add(p).add(e).add(rb).add(rs).add(sub).add(mb).add(sg).add(mx);
  // Z = scaled scores (+ broadcast key mask).
  let sc = z, mask: NodeId | undefined, maskSpec: FlashAttentionSpec["mask"];
  if (op(z, "add")) {
    const [a, b] = node(z).inputs;
    const [scn, bc] = op(b, "broadcast") ? [a, b] : [b, a];
    if (!op(bc, "broadcast")) return fail("the scores' addend is not a broadcast mask");
    const m = node(bc).inputs[0], ms = node(m).type.shape;
    const [bb, , sq] = node(z).type.shape;
    if (ms.length !== 4 || ms[0] !== bb || ms[1] !== 1 || ms[2] !== 1) return fail("the mask is not per key");
    forward.add(z).add(bc);
    if (c.materialized(m) && c.storedType(m) === "f32") {
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
        src < 0 || sv === undefined || mv === undefined || !c.materialized(src) || c.storedType(src) !== "i32"
      ) {
        return fail("the mask is neither an f32 buffer nor (i32 mask - c)·c'");
      }
      mask = src;
      maskSpec = { offset: 0, batch: sq, fromInt: { sub: sv, mul: mv } };
      for (const x of [rsh, mul, subN, castN, node(subN).inputs[1], node(mul).inputs[1]]) inline.add(x);
    }
    sc = scn;
  }
  if (!op(sc, "mul")) return fail("the scores are not scaled");
  const [s0, scaleC] = constOf(node(sc).inputs[1]) !== undefined
    ? node(sc).inputs
    : [...node(sc).inputs].reverse();
  // Mixed precision: f16 scores cast to f32 (the graph rounds Q·Kᵀ to f16 before scaling; the kernel does not).
  const s = op(s0, "cast") ? node(s0).inputs[0] : s0;
  const scale = constOf(scaleC);
  if (scale === undefined || !op(s, "matmul") || tr(node(s)) !== "false,true") return fail("no Q·Kᵀ");
  forward.add(sc).add(s0).add(s);
  inline.add(scaleC);
  const [qId, kId] = node(s).inputs;
  const [B, H, S, D] = node(qId).type.shape;
  for (const x of [qId, kId, vId]) {
    const sh = node(x).type.shape;
    if (sh.length !== 4 || sh.join() !== [B, H, S, D].join()) return fail("Q, K, V shapes differ");
    if (!c.materialized(x) || c.storedType(x) !== "f16") return fail("Q, K, V are not f16 buffers");
  }
  if (D !== FLASH_HEAD_DIM) return fail(`head dim ${D}, not ${FLASH_HEAD_DIM}`);
  // Backward: dP_d = dO·Vᵀ and dV = P_dᵀ·dO with one dO; dQ = dS·K and dK = dSᵀ·Q with one dS.
  const mm = (id: NodeId, t: string) => op(id, "matmul") && tr(node(id)) === t;
  const dv = users[pd].find((u) => mm(u, "true,false") && node(u).inputs[0] === pd);
  if (dv === undefined) return fail("no backward (inference)");
  const dO = node(dv).inputs[1];
  const dpd = users[vId].find((u) => mm(u, "false,true") && node(u).inputs.join() === [dO, vId].join());
  const dq = users[kId].find((u) => mm(u, "false,false") && node(u).inputs[1] === kId);
  if (dpd === undefined || dq === undefined) return fail("no dP or dQ GEMM");
  const dS = node(dq).inputs[0];
  const dk = users[qId].find((u) => mm(u, "true,false") && node(u).inputs.join() === [dS, qId].join());
  if (dk === undefined) return fail("no dK GEMM");
  if (
    !c.materialized(dO) || c.storedType(dO) !== "f16" || node(dO).type.shape.join() !== [B, H, S, D].join()
  ) {
    return fail("dO is not an f16 [B, H, S, 64] buffer");
  }
  // The softmax backward: every node between dP_d (and the forward's values) and dS.
  const backward = new Set<NodeId>([dv, dpd, dq, dk]);
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
  for (const m of [pv.id, dq, dk, dv]) {
    const view = storedView(c, users, m);
    const o = view && operandOf(view.strides);
    if (!view || !o || node(m).type.dtype !== "f16" || c.storedType(view.root) !== "f16") {
      return fail(`%${m} is not stored as f16 rows`);
    }
    for (const x of view.chain) (m === pv.id ? forward : backward).add(x);
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
  if (mm.op !== "matmul" || mm.type.dtype !== "f16" || c.storedType(anchor) !== "f16") {
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
  let view: { shape: readonly number[]; strides: readonly number[]; offset: number } | undefined = {
    shape: mm.type.shape,
    strides: contiguous(mm.type.shape),
    offset: 0,
  };
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
  const dtype = c.storedType(cur);
  if (!broadcast || !vector(node(cur).type.shape) || (dtype !== "f16" && dtype !== "f32")) {
    return `the bias %${id} is not an f16/f32 vector of ${cols} broadcast over the rows`;
  }
  // A cast on the way that narrows the stored value (an f32 buffer read as f16) would round it.
  if (path.some((x) => node(x).op === "cast" && node(x).type.dtype === "f16") && dtype !== "f16") {
    return `the bias %${id} is rounded to f16 on load`;
  }
  return { node: cur, dtype, path };
}
