/**
 * Recognizing the tanh-form GELU and its derivative exactly, for cuBLASLt's GELU epilogues (issue 16
 * item 1). cuBLASLt's GELU epilogues (GELU_AUX_BIAS forward, DGELU / DGELU_BGRAD backward) compute the tanh
 * approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): cublasLt.h names the epilogue only "GELU", and
 * PyTorch's decomposition of aten._addmm_activation (the op that reaches CUBLASLT_EPILOGUE_GELU_BIAS)
 * spells it as gelu(approximate="tanh") on CUDA and the erf form on the CPU. BERT's checkpoints use the
 * erf form (dsl/nn.ts gelu), which differs from the tanh form by up to 4.7e-4 (docs/cuda.md), so only a
 * model whose hidden_act is gelu_new / gelu_pytorch_tanh / gelu_fast (dsl/nn.ts geluTanh) may take them,
 * and a chain that is not exactly that function must never match.
 *
 * "Exactly" is decided algebraically, not by the shape of the graph (autodiff and simplification rearrange
 * the chain): the elementwise cone of a node is expanded into a polynomial whose variables are the nodes
 * it stops at — the pre-activation P, tanh nodes, and any other value (dY) — with the constants' f64
 * values as coefficients. Forward, act must be the polynomial 0.5·P + 0.5·P·T with T a tanh node whose
 * argument is the polynomial c·P + c·a·P³ (c = √(2/π), a = 0.044715); backward, the gradient must be
 * D·GELU'(P) for one other variable D, GELU'(P) = 0.5 + 0.5·T + 0.5·c·P·(1 − T²) + 1.5·c·a·P³·(1 − T²),
 * the derivative of the same function (what cuBLASLt's DGELU applies to its product). Two polynomials
 * are equal when every coefficient agrees to 1e-9 relative (the constants are f64 attributes; a near miss
 * such as 0.0447 for 0.044715 is off by 3e-4). Only f32 add / sub / mul / neg and constants are expanded
 * (a node of another dtype would round in the middle of the chain), so an erf, a cast to f16, a division
 * or anything else stops the expansion and leaves a variable that has no place in either polynomial.
 */
import type { Graph, NodeId } from "../../ir/mod.ts";

/** √(2/π) and the cubic coefficient of the tanh form (dsl/nn.ts geluTanh). */
const C = Math.sqrt(2 / Math.PI), A = 0.044715;

/** A monomial: variable node ids with their exponents, as a canonical key ("3^1*7^2"); "" is 1. */
type Poly = Map<string, number>;

const key = (vars: ReadonlyMap<NodeId, number>) =>
  [...vars].filter(([, e]) => e > 0).sort((x, y) => x[0] - y[0]).map(([v, e]) => `${v}^${e}`).join("*");

const parse = (k: string): Map<NodeId, number> =>
  new Map(k === "" ? [] : k.split("*").map((t) => t.split("^").map(Number) as [number, number]));

function addInto(into: Poly, p: Poly, scale: number): void {
  for (const [k, c] of p) into.set(k, (into.get(k) ?? 0) + scale * c);
}

function times(p: Poly, q: Poly): Poly {
  const out: Poly = new Map();
  for (const [kp, cp] of p) {
    for (const [kq, cq] of q) {
      const vars = parse(kp);
      for (const [v, e] of parse(kq)) vars.set(v, (vars.get(v) ?? 0) + e);
      const k = key(vars);
      out.set(k, (out.get(k) ?? 0) + cp * cq);
    }
  }
  return out;
}

/** Past this many terms a cone is no GELU (the derivative has 8): stop expanding. */
const MAX_TERMS = 64;

/**
 * The polynomial node `id` computes over the variables it stops at: `stop` (always a variable), and any
 * node that is not an f32 add / sub / mul / neg, a constant, or a reshape / broadcast of a constant.
 */
function polyOf(g: Graph, id: NodeId, stop: ReadonlySet<NodeId>, memo = new Map<NodeId, Poly>()): Poly {
  const hit = memo.get(id);
  if (hit) return hit;
  const n = g.nodes[id];
  const variable = (): Poly => new Map([[key(new Map([[id, 1]])), 1]]);
  let p: Poly;
  if (stop.has(id)) {
    p = variable();
  } else if (n.op === "const") {
    p = new Map([["", n.attrs.value as number]]);
  } else if (n.op === "reshape" || n.op === "broadcast") {
    const inner = polyOf(g, n.inputs[0], stop, memo);
    p = inner.size <= 1 && [...inner.keys()].every((k) => k === "") ? inner : variable();
  } else if (n.type.dtype !== "f32" || !["add", "sub", "mul", "neg"].includes(n.op)) {
    p = variable();
  } else {
    const ins = n.inputs.map((i) => polyOf(g, i, stop, memo));
    if (n.op === "mul") {
      p = times(ins[0], ins[1]);
    } else {
      p = new Map();
      addInto(p, ins[0], n.op === "neg" ? -1 : 1);
      if (n.op !== "neg") addInto(p, ins[1], n.op === "sub" ? -1 : 1);
    }
    for (const [k, c] of p) if (c === 0) p.delete(k);
    if (p.size > MAX_TERMS) p = variable();
  }
  memo.set(id, p);
  return p;
}

/** Every coefficient of `p` and `q` agrees to 1e-9 relative (and no term of one is missing in the other). */
function samePoly(p: Poly, q: Poly): boolean {
  for (const k of new Set([...p.keys(), ...q.keys()])) {
    const a = p.get(k) ?? 0, b = q.get(k) ?? 0;
    if (Math.abs(a - b) > 1e-9 * Math.max(Math.abs(a), Math.abs(b))) return false;
  }
  return true;
}

/** A polynomial from terms [coefficient, [variable, exponent]...]. */
const polyFrom = (terms: readonly (readonly [number, readonly (readonly [NodeId, number])[]])[]): Poly => {
  const p: Poly = new Map();
  for (const [c, vars] of terms) {
    const k = key(new Map(vars));
    p.set(k, (p.get(k) ?? 0) + c);
  }
  return p;
};

/** The variables of `p`. */
const variablesOf = (p: Poly): Set<NodeId> => new Set([...p.keys()].flatMap((k) => [...parse(k).keys()]));

/** Whether tanh node `t` is tanh(c·(P + a·P³)) of node `pre`, exactly. */
export function isTanhOfGeluArgument(g: Graph, t: NodeId, pre: NodeId): boolean {
  const n = g.nodes[t];
  if (n.op !== "tanh" || n.type.dtype !== "f32") return false;
  const arg = polyOf(g, n.inputs[0], new Set([pre]));
  return samePoly(arg, polyFrom([[C, [[pre, 1]]], [C * A, [[pre, 3]]]]));
}

/** The tanh node(s) among a polynomial's variables that are the GELU argument's tanh of `pre`. */
const geluTanhsOf = (g: Graph, p: Poly, pre: NodeId) =>
  [...variablesOf(p)].filter((v) => v !== pre && isTanhOfGeluArgument(g, v, pre));

/**
 * Whether node `act` computes exactly the tanh-form GELU of node `pre`: 0.5·P·(1 + tanh(c·(P + a·P³))),
 * every operation in f32 (dsl/nn.ts geluTanh, in any arrangement).
 */
export function isTanhGelu(g: Graph, act: NodeId, pre: NodeId): boolean {
  if (act === pre || g.nodes[act].type.dtype !== "f32") return false;
  const p = polyOf(g, act, new Set([pre]));
  const ts = geluTanhsOf(g, p, pre);
  if (ts.length !== 1 || variablesOf(p).size !== 2) return false;
  return samePoly(p, polyFrom([[0.5, [[pre, 1]]], [0.5, [[pre, 1], [ts[0], 1]]]]));
}

/**
 * The pre-activation whose tanh-form GELU node `act` computes, or undefined: the tanh nodes in act's
 * cone propose their argument's nodes as candidates, each checked exactly by isTanhGelu.
 */
export function tanhGeluInput(g: Graph, act: NodeId): NodeId | undefined {
  if (!nearTanh(g, act)) return undefined;
  const cone = polyOf(g, act, new Set());
  for (const t of variablesOf(cone)) {
    if (g.nodes[t].op !== "tanh") continue;
    for (const pre of candidates(g, g.nodes[t].inputs[0])) if (isTanhGelu(g, act, pre)) return pre;
  }
  return undefined;
}

/**
 * Whether a tanh node is within a few elementwise steps of `id` (GELU within 3 and its autodiff gradient
 * within 7 in the graphs the DSL makes): a cheap test before expanding a cone, which callers run on every
 * candidate node of a graph.
 */
function nearTanh(g: Graph, id: NodeId, depth = 12): boolean {
  const seen = new Set<NodeId>([id]);
  let level = [id];
  for (let d = 0; d <= depth && level.length; d++) {
    const next: NodeId[] = [];
    for (const cur of level) {
      const n = g.nodes[cur];
      if (n.op === "tanh") return true;
      if (n.type.dtype !== "f32" || !["add", "sub", "mul", "neg"].includes(n.op)) continue;
      for (const i of n.inputs) if (!seen.has(i)) (seen.add(i), next.push(i));
    }
    level = next;
  }
  return false;
}

/** The nodes of the elementwise cone of `id` (itself included), nearest first: where P may be. */
function candidates(g: Graph, id: NodeId): NodeId[] {
  const out: NodeId[] = [];
  const seen = new Set<NodeId>();
  const queue = [id];
  while (queue.length && out.length < 32) {
    const cur = queue.shift()!;
    if (seen.has(cur)) continue;
    seen.add(cur);
    const n = g.nodes[cur];
    if (n.op === "const") continue;
    out.push(cur);
    if (["add", "sub", "mul", "neg"].includes(n.op) && n.type.dtype === "f32") queue.push(...n.inputs);
  }
  return out;
}

/**
 * Whether node `grad` computes exactly D·GELU'(P) for the tanh-form GELU of node `pre` and one other
 * value D (the gradient arriving at the activation), returning D; undefined otherwise. GELU'(P) is the
 * derivative of isTanhGelu's function: 0.5·(1 + T) + 0.5·P·(1 − T²)·c·(1 + 3a·P²), T = tanh(c·(P + a·P³)).
 */
export function tanhGeluGradient(g: Graph, grad: NodeId, pre: NodeId): NodeId | undefined {
  if (grad === pre || g.nodes[grad].type.dtype !== "f32" || !nearTanh(g, grad)) return undefined;
  const p = polyOf(g, grad, new Set([pre]));
  const ts = geluTanhsOf(g, p, pre);
  const others = [...variablesOf(p)].filter((v) => v !== pre && !ts.includes(v));
  if (ts.length !== 1 || others.length !== 1) return undefined;
  const [t] = ts, [d] = others;
  const want = polyFrom([
    [0.5, [[d, 1]]],
    [0.5, [[d, 1], [t, 1]]],
    [0.5 * C, [[d, 1], [pre, 1]]],
    [-0.5 * C, [[d, 1], [pre, 1], [t, 2]]],
    [1.5 * C * A, [[d, 1], [pre, 3]]],
    [-1.5 * C * A, [[d, 1], [pre, 3], [t, 2]]],
  ]);
  return samePoly(p, want) ? d : undefined;
}
