/**
 * Gradient checks of every VJP rule against central finite differences, evaluated in f64 by the
 * reference interpreter. Each case builds `loss = sum(op(params) * R)` for a fixed random R, so every
 * element of the op's cotangent is distinct, and compares the autodiff gradient of each parameter with
 * (L(x+h) - L(x-h)) / 2h. Inputs are fresh random numbers each run (the seed is in failure messages),
 * never zero, and kept away from kinks and ties. Every op of ir/ops.ts must have a case here or be
 * listed as non-differentiable with a reason, so a new op without a test fails the suite.
 */
import assert from "node:assert/strict";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { VJP } from "../../compiler/training_graph/vjp.ts";
import { GraphEditor } from "../../compiler/graph/edit.ts";
import {
  assertValidGraph,
  type DType,
  Graph,
  type NodeId,
  numel,
  OP_NAMES,
  type OpName,
} from "../../ir/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";

// ---- seeded randomness: fresh each run, reproducible from the seed printed on failure ----------
const SEED = (Math.random() * 2 ** 32) >>> 0;
let state = SEED;
/** A uniform number in [0,1) from a 32-bit xorshift generator. */
function rand(): number {
  state ^= state << 13;
  state ^= state >>> 17;
  state ^= state << 5;
  state >>>= 0;
  return state / 2 ** 32;
}
const uniform = (lo: number, hi: number) => lo + (hi - lo) * rand();

type Gen = (n: number) => number[];
/** Away from zero on both sides: the kinks of abs, the poles of reciprocal and div. */
const signed: Gen = (n) => Array.from({ length: n }, () => (rand() < 0.5 ? -1 : 1) * uniform(0.3, 1.2));
/** The domain of log, sqrt and rsqrt, away from 0. */
const positive: Gen = (n) => Array.from({ length: n }, () => uniform(0.5, 2));
/** Pairwise distinct with gaps far above h, so reduce_max has a single, stable winner. */
const distinct: Gen = (n) => {
  const order = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order.map((k) => (2 * (k + 0.5 + 0.3 * (rand() - 0.5))) / n - 1 + 0.01);
};

// ---- building a case ----------------------------------------------------------------------------
class Case {
  readonly graph: Graph;
  readonly e: GraphEditor;
  readonly feeds: Record<string, number[]> = {};
  readonly params: string[] = [];

  constructor(readonly title: string) {
    this.graph = new Graph(title);
    this.e = new GraphEditor(this.graph);
  }

  /** A trainable f32 operand with values from `gen` (or the given values). */
  param(shape: number[], gen: Gen | number[] = signed): NodeId {
    const name = `p${this.params.length}`;
    this.params.push(name);
    this.feeds[name] = typeof gen === "function" ? gen(numel(shape)) : gen;
    return this.graph.add("param", [], { name, init: "zeros" }, { shape, dtype: "f32" });
  }

  /** A run-time operand that is not differentiated (indices, conditions, R). */
  input(name: string, shape: number[], dtype: DType, values: number[]): NodeId {
    this.feeds[name] = values;
    return this.graph.add("input", [], { name }, { shape, dtype });
  }

  /** loss = sum(y * R), with R random and fixed, so each element of y's cotangent differs. */
  finish(y: NodeId): this {
    const t = this.e.type(y);
    const r = this.input("R", [...t.shape], t.dtype, signed(numel(t.shape)));
    const prod = this.e.mul(y, r);
    const rank = t.shape.length;
    const loss = rank ? this.e.reduceSum(prod, t.shape.map((_, i) => i)) : prod;
    this.graph.setOutput("loss", loss);
    return this;
  }
}

const H = 1e-6;
const RTOL = 1e-6;
const ATOL = 1e-7;

/** Compares the autodiff gradient of every param of the case with central finite differences. */
function gradcheck(c: Case): void {
  const dg = differentiate(c.graph, "loss");
  assertValidGraph(dg, c.title);
  const got = evaluate(dg, c.feeds, { outputs: c.params.map((p) => `grad.${p}`) });
  const lossAt = (feeds: Record<string, number[]>) =>
    evaluate(c.graph, feeds, { outputs: ["loss"] }).get("loss")![0];
  for (const p of c.params) {
    const x = c.feeds[p];
    const grad = got.get(`grad.${p}`)!;
    assert.equal(grad.length, x.length, `${c.title}: grad.${p} has the wrong size`);
    for (let j = 0; j < x.length; j++) {
      const h = H * Math.max(1, Math.abs(x[j]));
      const plus = [...x], minus = [...x];
      plus[j] += h;
      minus[j] -= h;
      const fd = (lossAt({ ...c.feeds, [p]: plus }) - lossAt({ ...c.feeds, [p]: minus })) / (2 * h);
      const err = Math.abs(grad[j] - fd);
      assert.ok(
        err <= ATOL + RTOL * Math.abs(fd),
        `${c.title}: d loss / d ${p}[${j}] is ${grad[j]}, finite differences give ${fd} (seed ${SEED})`,
      );
    }
  }
}

// ---- the cases: one or more per differentiable op -------------------------------------------------
type CaseDef = { op: OpName; title: string; build: (c: Case) => NodeId };
const CASES: CaseDef[] = [];
const SHAPES: number[][] = [[], [5], [2, 3, 4]];

const UNARY: [OpName, Gen][] = [
  ["neg", signed],
  ["abs", signed],
  ["exp", signed],
  ["log", positive],
  ["tanh", signed],
  ["erf", signed],
  ["sqrt", positive],
  ["rsqrt", positive],
  ["reciprocal", signed],
];
for (const [op, gen] of UNARY) {
  for (const s of SHAPES) {
    CASES.push({ op, title: `${op} f32[${s}]`, build: (c) => c.e.node(op, [c.param(s, gen)]) });
  }
}
CASES.push({ op: "cast", title: "cast f32->f32", build: (c) => c.e.cast(c.param([2, 3]), "f32") });

for (const op of ["add", "sub", "mul", "div"] as const) {
  for (const s of SHAPES) {
    CASES.push({ op, title: `${op} f32[${s}]`, build: (c) => c.e.node(op, [c.param(s), c.param(s)]) });
  }
}
// x op x: both operands are the same node, so the two contributions must add up.
CASES.push({ op: "mul", title: "mul x*x", build: (c) => ((x) => c.e.mul(x, x))(c.param([4])) });
for (const op of ["max", "min"] as const) {
  for (const s of SHAPES) {
    CASES.push({
      op,
      title: `${op} f32[${s}]`,
      build: (c) => {
        // b differs from a by at least 0.1 either way, so no pair is near a tie.
        const a = signed(numel(s));
        const b = a.map((v) => v + (rand() < 0.5 ? -1 : 1) * uniform(0.1, 0.6));
        return c.e.node(op, [c.param(s, a), c.param(s, b)]);
      },
    });
  }
}
CASES.push({
  op: "where",
  title: "where f32[3,4]",
  build: (c) => {
    const cond = c.input(
      "cond",
      [3, 4],
      "bool",
      Array.from({ length: 12 }, (_, i) => (i % 3 === 0 || rand() < 0.5 ? 1 : 0)),
    );
    return c.e.where(cond, c.param([3, 4]), c.param([3, 4]));
  },
});

for (const axes of [[0, 2], [1], [0, 1, 2]]) {
  CASES.push({
    op: "reduce_sum",
    title: `reduce_sum [3,4,5] axes [${axes}]`,
    build: (c) => c.e.reduceSum(c.param([3, 4, 5]), axes),
  });
  CASES.push({
    op: "reduce_max",
    title: `reduce_max [3,4,5] axes [${axes}]`,
    build: (c) => c.e.node("reduce_max", [c.param([3, 4, 5], distinct)], { axes }),
  });
}
CASES.push({
  op: "reduce_sum",
  title: "reduce_sum [6] axes [0]",
  build: (c) => c.e.reduceSum(c.param([6]), [0]),
});

for (const [from, to] of [[[2, 3, 4], [6, 4]], [[6], [2, 3]], [[], [1, 1]], [[2, 6], [12]]]) {
  CASES.push({
    op: "reshape",
    title: `reshape [${from}] -> [${to}]`,
    build: (c) => c.e.node("reshape", [c.param(from)], { shape: to }),
  });
}
// Inserted leading dims, size-1 dims, both, a scalar, and the identity.
for (
  const [from, to] of [[[3, 1], [2, 3, 4]], [[4], [3, 4]], [[2, 1, 4], [2, 3, 4]], [[], [2, 3]], [[1, 1], [
    1,
    3,
  ]], [[2, 3], [2, 3]]]
) {
  CASES.push({
    op: "broadcast",
    title: `broadcast [${from}] -> [${to}]`,
    build: (c) => c.e.node("broadcast", [c.param(from)], { shape: to }),
  });
}
for (const [shape, perm] of [[[2, 3, 4], [2, 0, 1]], [[3, 5], [1, 0]], [[2, 3, 4, 2], [1, 3, 0, 2]]]) {
  CASES.push({
    op: "permute",
    title: `permute [${shape}] by [${perm}]`,
    build: (c) => c.e.permute(c.param(shape), perm),
  });
}
for (const [shape, start, end] of [[[4, 5], [1, 2], [3, 5]], [[3, 4, 5], [0, 1, 1], [3, 3, 4]]]) {
  CASES.push({
    op: "slice",
    title: `slice [${shape}] [${start}]..[${end}]`,
    build: (c) => c.e.slice(c.param(shape), start, end),
  });
}
for (const [shape, low, high] of [[[3, 4], [1, 0], [2, 3]], [[2, 3, 2], [0, 1, 2], [1, 0, 1]]]) {
  CASES.push({
    op: "pad",
    title: `pad [${shape}] low [${low}] high [${high}]`,
    build: (c) => c.e.pad(c.param(shape), low, high),
  });
}
for (
  const [axis, shapes] of [[1, [[2, 1, 3], [2, 2, 3], [2, 3, 3]]], [0, [[1, 4], [2, 4], [3, 4]]]] as const
) {
  CASES.push({
    op: "concat",
    title: `concat of 3 on axis ${axis}`,
    build: (c) => c.e.node("concat", shapes.map((s) => c.param([...s])), { axis }),
  });
}
for (const batch of [[], [2]]) {
  for (const ta of [false, true]) {
    for (const tb of [false, true]) {
      const [m, k, n] = [3, 4, 2];
      CASES.push({
        op: "matmul",
        title: `matmul [${batch}] ${ta ? "Aᵀ" : "A"} ${tb ? "Bᵀ" : "B"}`,
        build: (c) =>
          c.e.matmul(
            c.param([...batch, ...(ta ? [k, m] : [m, k])]),
            c.param([...batch, ...(tb ? [n, k] : [k, n])]),
            ta,
            tb,
          ),
      });
    }
  }
}
/** Random indices in [0, rows) with the first one repeated, so accumulation is exercised. */
function indicesWithRepeats(n: number, rows: number): number[] {
  const idx = Array.from({ length: n }, () => Math.floor(rand() * rows));
  idx[n - 1] = idx[0];
  return idx;
}
CASES.push({
  op: "gather",
  title: "gather [5,3] by i32[2,4] with repeats",
  build: (c) => c.e.gather(c.param([5, 3]), c.input("idx", [2, 4], "i32", indicesWithRepeats(8, 5))),
});
CASES.push({
  op: "gather",
  title: "gather [6] by i32[5] with repeats",
  build: (c) => c.e.gather(c.param([6]), c.input("idx", [5], "i32", indicesWithRepeats(5, 6))),
});
CASES.push({
  op: "scatter_add",
  title: "scatter_add i32[4] [4,3] into 5 rows with repeats",
  build: (c) => c.e.scatterAdd(c.input("idx", [4], "i32", indicesWithRepeats(4, 5)), c.param([4, 3]), 5),
});
CASES.push({
  op: "scatter_add",
  title: "scatter_add i32[2,3] [2,3,2] into 4 rows with repeats",
  build: (c) =>
    c.e.scatterAdd(c.input("idx", [2, 3], "i32", indicesWithRepeats(6, 4)), c.param([2, 3, 2]), 4),
});

// The interpreter's own attention (numeric/reference_attention.ts): its forward against its attention_grad.
CASES.push({
  op: "attention",
  title: "attention [2,3,4,2]·[2,3,4,2]ᵀ·[2,3,4,3], a [2,1,1,4] mask, dropout 0.3",
  build: (c) => {
    const qkv = [2, 2, 3].map((d) => c.param([2, 3, 4, d]));
    const mask = c.input("mask", [2, 1, 1, 4], "f32", signed(8)), key = c.input("key", [2], "u32", [7, 11]);
    return c.graph.add("attention", [...qkv, mask, key], { scale: 0.7, dropout: 0.3, stream: 5 });
  },
});

/** Ops that pass no gradient to any operand, and why. */
const NON_DIFFERENTIABLE: Partial<Record<OpName, string>> = {
  input: "source: a run-time value, not trained",
  param: "source: the root that gradients flow to, with no operands of its own",
  const: "source: a constant",
  iota: "source: integer indices",
  stop_gradient: "its derivative is zero by definition",
  not: "bool",
  and: "bool",
  or: "bool",
  eq: "comparison: piecewise constant",
  ne: "comparison: piecewise constant",
  lt: "comparison: piecewise constant",
  le: "comparison: piecewise constant",
  gt: "comparison: piecewise constant",
  ge: "comparison: piecewise constant",
  random_uniform: "random numbers depend on nothing differentiable",
  attention_grad: "a gradient: nothing differentiates a step twice",
};

// ---- the tests ----------------------------------------------------------------------------------
Deno.test("every op has a gradient check or a reason it has no gradient", () => {
  const checked = new Set(CASES.map((c) => c.op));
  const missing = OP_NAMES.filter((op) => !checked.has(op) && !NON_DIFFERENTIABLE[op]);
  assert.deepEqual(missing, [], `ops with neither a gradcheck case nor a reason: ${missing.join(", ")}`);
  for (const op of OP_NAMES) {
    if (NON_DIFFERENTIABLE[op]) {
      assert.equal(VJP[op], null, `${op} is listed as non-differentiable but has a rule`);
    }
    if (checked.has(op)) assert.notEqual(VJP[op], null, `${op} has a gradcheck case but no rule`);
  }
});

for (const def of CASES) {
  Deno.test(`gradcheck: ${def.title}`, () => {
    const c = new Case(def.title);
    const y = def.build(c);
    assert.equal(c.graph.nodes[y].op, def.op, `${def.title}: the case must end in the op it checks`);
    c.finish(y);
    gradcheck(c);
    // The backward graph is made of the forward op set, and its cotangents have their nodes' dtypes.
    const dg = differentiate(c.graph, "loss");
    for (const p of c.params) assert.equal(dg.nodes[dg.outputs.get(`grad.${p}`)!].type.dtype, "f32");
  });
}

Deno.test("cast f32 -> f16 -> f32: the cotangent is cast back, at each node's dtype", () => {
  const c = new Case("cast through f16");
  const x = c.param([2, 3]);
  const half = c.e.cast(x, "f16");
  c.finish(c.e.cast(half, "f32"));
  const dg = differentiate(c.graph, "loss");
  assertValidGraph(dg);
  const gx = dg.nodes[dg.outputs.get("grad.p0")!];
  assert.equal(gx.op, "cast");
  assert.equal(gx.type.dtype, "f32");
  assert.equal(dg.nodes[gx.inputs[0]].type.dtype, "f16");
  // The gradient is R seen through f16 storage: equal to R within f16's relative precision.
  const got = evaluate(dg, c.feeds, { outputs: ["grad.p0"] }).get("grad.p0")!;
  c.feeds.R.forEach((r, i) => assert.ok(Math.abs(got[i] - r) <= 2 ** -11 * Math.abs(r), `${got[i]} vs ${r}`));
});

/**
 * Graphs where a parameter reaches the loss only through an op (or operand) that passes no gradient:
 * its gradient must be a zero constant and the backward pass must build nothing else.
 */
const BLOCKED: [string, (c: Case, x: NodeId) => NodeId][] = [
  ["stop_gradient", (c, x) => c.e.node("stop_gradient", [x])],
  ["not", (c, x) => c.e.cast(c.e.node("not", [c.e.node("gt", [x, c.e.constLike(0, c.e.type(x))])]), "f32")],
  ...(["and", "or"] as const).map((op): [string, (c: Case, x: NodeId) => NodeId] => [op, (c, x) => {
    const zero = c.e.constLike(0, c.e.type(x));
    return c.e.cast(
      c.e.node(op, [c.e.node("gt", [x, zero]), c.e.lt(x, c.e.constLike(0.5, c.e.type(x)))]),
      "f32",
    );
  }]),
  ...(["eq", "ne", "lt", "le", "gt", "ge"] as const).map((op): [string, (c: Case, x: NodeId) => NodeId] => [
    op,
    (c, x) => c.e.cast(c.e.node(op, [x, c.e.constLike(0.1, c.e.type(x))]), "f32"),
  ]),
  [
    "random_uniform (key from a cast to u32)",
    (c, x) =>
      c.e.node("random_uniform", [c.e.cast(x, "u32")], { stream: 0 }, { shape: [2, 3], dtype: "f32" }),
  ],
  ["cast to i32 and back", (c, x) => c.e.cast(c.e.cast(x, "i32"), "f32")],
  ["where's condition", (c, x) => {
    const t = c.e.type(x);
    return c.e.where(c.e.node("gt", [x, c.e.constLike(0, t)]), c.e.constLike(1, t), c.e.constLike(-1, t));
  }],
  ["gather's indices", (c, x) => c.e.gather(c.input("table", [4, 3], "f32", signed(12)), c.e.cast(x, "i32"))],
];

for (const [title, block] of BLOCKED) {
  Deno.test(`no gradient edges: ${title}`, () => {
    const c = new Case(title);
    const x = c.param([2], [1.5, 2.5]); // valid u32 key and valid gather rows after truncation
    c.finish(block(c, x));
    const dg = differentiate(c.graph, "loss");
    assertValidGraph(dg);
    const added = dg.nodes.slice(c.graph.nodes.length);
    assert.deepEqual(added.map((n) => n.op), ["const"], `${title}: backward nodes ${added.map((n) => n.op)}`);
    const gx = dg.nodes[dg.outputs.get("grad.p0")!];
    assert.equal(gx.op, "const");
    assert.equal(gx.attrs.value, 0);
    assert.deepEqual(evaluate(dg, c.feeds, { outputs: ["grad.p0"] }).get("grad.p0"), new Float64Array(2));
  });
}
