/**
 * The autodiff pass as a whole: fan-out accumulation, pruning both ways, stop_gradient, the shape of
 * the result graph (ids, outputs, verifier, text round trip), errors, speed on a deep graph, and an
 * end-to-end gradient check of a chain mixing movement, reductions, matmul and gather against central
 * finite differences run by the reference interpreter in f64.
 */
import assert from "node:assert/strict";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { GraphEditor } from "../../compiler/graph/edit.ts";
import {
  assertValidGraph,
  type DType,
  Graph,
  IRError,
  type NodeId,
  numel,
  parseGraph,
  printGraph,
} from "../../ir/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";

/** Random values away from zero, fresh each run. */
const signed = (n: number) =>
  Array.from({ length: n }, () => (Math.random() < 0.5 ? -1 : 1) * (0.3 + 0.9 * Math.random()));

/** A graph under construction plus the values to feed its sources. */
class Fixture {
  readonly graph: Graph;
  readonly e: GraphEditor;
  readonly feeds: Record<string, number[]> = {};

  constructor(name: string) {
    this.graph = new Graph(name);
    this.e = new GraphEditor(this.graph);
  }
  param(name: string, shape: number[], values = signed(numel(shape))): NodeId {
    this.feeds[name] = values;
    return this.graph.add("param", [], { name, init: "zeros" }, { shape, dtype: "f32" });
  }
  input(name: string, shape: number[], dtype: DType = "f32", values = signed(numel(shape))): NodeId {
    this.feeds[name] = values;
    return this.graph.add("input", [], { name }, { shape, dtype });
  }
  /** Sets output "loss" = sum(y * R) for a random input R. */
  lossOf(y: NodeId): NodeId {
    const shape = [...this.e.shape(y)];
    const prod = this.e.mul(y, this.input("R", shape));
    const loss = shape.length ? this.e.reduceSum(prod, shape.map((_, i) => i)) : prod;
    this.graph.setOutput("loss", loss);
    return loss;
  }
}

/** Central finite differences of output "loss" of g with respect to feed `p`, in f64. */
function finiteDiff(g: Graph, feeds: Record<string, number[]>, p: string): number[] {
  const L = (f: Record<string, number[]>) => evaluate(g, f, { outputs: ["loss"] }).get("loss")![0];
  return feeds[p].map((v, j) => {
    const h = 1e-6 * Math.max(1, Math.abs(v));
    const plus = [...feeds[p]], minus = [...feeds[p]];
    plus[j] += h;
    minus[j] -= h;
    return (L({ ...feeds, [p]: plus }) - L({ ...feeds, [p]: minus })) / (2 * h);
  });
}

function assertClose(
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  what: string,
  rtol = 1e-6,
  atol = 1e-7,
) {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < got.length; i++) {
    assert.ok(
      Math.abs(got[i] - want[i]) <= atol + rtol * Math.abs(want[i]),
      `${what}[${i}]: got ${got[i]}, want ${want[i]}`,
    );
  }
}

const backwardNodes = (fwd: Graph, dg: Graph) => dg.nodes.slice(fwd.nodes.length);

Deno.test("fan-out: a node used three times gets the sum of three contributions", () => {
  const f = new Fixture("fanout");
  const x = f.param("x", [6]);
  // y = x*x + tanh(x): x feeds mul twice and tanh once.
  f.lossOf(f.e.add(f.e.mul(x, x), f.e.node("tanh", [x])));
  const dg = differentiate(f.graph, "loss");
  assertValidGraph(dg);
  const { x: xs, R } = f.feeds;
  const want = xs.map((v, i) => R[i] * (2 * v + 1 - Math.tanh(v) ** 2));
  assertClose(evaluate(dg, f.feeds, { outputs: ["grad.x"] }).get("grad.x")!, want, "grad.x", 1e-12, 1e-14);
  // Three contributions are summed by exactly two accumulating adds, the last of which is grad.x.
  const gx = dg.nodes[dg.outputs.get("grad.x")!];
  assert.equal(gx.op, "add");
  assert.equal(dg.nodes[gx.inputs[0]].op, "add");
});

Deno.test("pruning: off-path nodes get no backward nodes; an unused param gets a zero gradient", () => {
  // The same loss computation, built with and without side branches that the loss does not use.
  const build = (withSides: boolean) => {
    const f = new Fixture("prune");
    const x = f.input("x", [3, 4]);
    const w = f.param("w", [4, 2]);
    const u = f.param("u", [2]);
    if (withSides) {
      f.graph.setOutput("side_w", f.e.node("exp", [f.e.mul(w, w)])); // uses w, not the loss
      f.graph.setOutput("side_u", f.e.node("tanh", [u])); // u only reaches this output
    }
    const h = f.e.matmul(x, w);
    const loss = f.lossOf(f.e.node("tanh", [h]));
    if (withSides) f.graph.setOutput("after_loss", f.e.mul(loss, loss)); // downstream of the loss
    return f;
  };
  const lean = build(false), full = build(true);
  const dLean = differentiate(lean.graph, "loss"), dFull = differentiate(full.graph, "loss");
  assertValidGraph(dFull);
  assert.equal(backwardNodes(full.graph, dFull).length, backwardNodes(lean.graph, dLean).length);
  // Nothing in the backward part reads an off-path forward node.
  const offPath = new Set(
    ["side_w", "side_u", "after_loss"].flatMap((o) => {
      const id = full.graph.outputs.get(o)!;
      return [id, ...full.graph.nodes[id].inputs.filter((i) => full.graph.nodes[i].op !== "param")];
    }),
  );
  for (const n of backwardNodes(full.graph, dFull)) {
    for (const i of n.inputs) assert.ok(!offPath.has(i), `backward %${n.id} (${n.op}) reads off-path %${i}`);
  }
  // The input x is not differentiated: w's matmul VJP builds one matmul (for w), none for x.
  assert.equal(backwardNodes(full.graph, dFull).filter((n) => n.op === "matmul").length, 1);
  const gu = dFull.nodes[dFull.outputs.get("grad.u")!];
  assert.equal(gu.op, "const");
  assert.equal(gu.attrs.value, 0);
  assert.deepEqual(gu.type, { shape: [2], dtype: "f32" });
  // Forward nodes keep their ids and every forward output survives.
  full.graph.nodes.forEach((n, i) => assert.equal(dFull.nodes[i], n));
  for (const [name, id] of full.graph.outputs) assert.equal(dFull.outputs.get(name), id);
  assert.deepEqual([...dFull.outputs.keys()].filter((k) => k.startsWith("grad.")), ["grad.w", "grad.u"]);
});

Deno.test("wrt: only the listed params get gradients and their paths", () => {
  const f = new Fixture("wrt");
  const a = f.param("a", [3]);
  const b = f.param("b", [3]);
  f.lossOf(f.e.mul(f.e.node("exp", [a]), f.e.node("tanh", [b])));
  const dg = differentiate(f.graph, "loss", ["b"]);
  assert.deepEqual([...dg.outputs.keys()], ["loss", "grad.b"]);
  // exp(a) is a constant here: no node of the backward part reads the exp result for a's sake.
  assert.ok(!backwardNodes(f.graph, dg).some((n) => n.op === "exp"));
  assertClose(
    evaluate(dg, f.feeds, { outputs: ["grad.b"] }).get("grad.b")!,
    finiteDiff(f.graph, f.feeds, "b"),
    "grad.b",
  );
});

Deno.test("stop_gradient blocks the gradient of its operand", () => {
  const f = new Fixture("stop");
  const x = f.param("x", [5]);
  // y = x * stop_gradient(x): dy/dx = stop_gradient(x) = x, not 2x.
  f.lossOf(f.e.mul(x, f.e.node("stop_gradient", [x])));
  const dg = differentiate(f.graph, "loss");
  const { x: xs, R } = f.feeds;
  assertClose(
    evaluate(dg, f.feeds, { outputs: ["grad.x"] }).get("grad.x")!,
    xs.map((v, i) => v * R[i]),
    "grad.x",
  );
});

Deno.test("the result verifies and survives print -> parse -> print", () => {
  const f = new Fixture("roundtrip");
  const x = f.param("x", [2, 3]);
  const y = f.e.node("erf", [f.e.broadcast(f.e.reduceSum(x, [1]), [2, 3])]);
  const peak = f.e.broadcast(f.e.node("reduce_max", [x], { axes: [0] }), [2, 3]);
  f.lossOf(f.e.add(f.e.mul(y, x), f.e.cast(f.e.node("neg", [peak]), "f32")));
  const dg = differentiate(f.graph, "loss");
  assertValidGraph(dg, "autodiff");
  const text = printGraph(dg);
  const back = parseGraph(text);
  assertValidGraph(back);
  assert.equal(printGraph(back), text);
});

Deno.test("the loss seed is 1 at the loss's type, including shapes of all ones", () => {
  const f = new Fixture("seed");
  const x = f.param("x", [2, 2]);
  const s = f.e.reduceSum(f.e.mul(x, x), [0, 1]); // f32[1,1]
  f.graph.setOutput("loss", s);
  const dg = differentiate(f.graph, "loss");
  const seed = dg.nodes[f.graph.nodes.length];
  assert.equal(seed.op, "const");
  assert.equal(seed.attrs.value, 1);
  assert.deepEqual(seed.type, { shape: [1, 1], dtype: "f32" });
  assertClose(evaluate(dg, f.feeds).get("grad.x")!, f.feeds.x.map((v) => 2 * v), "grad.x");
});

Deno.test("errors name the problem", () => {
  const f = new Fixture("errors");
  const x = f.param("x", [3]);
  f.graph.setOutput("vec", f.e.node("exp", [x]));
  f.graph.setOutput("loss", f.e.reduceSum(x, [0]));
  assert.throws(
    () => differentiate(f.graph, "nope"),
    (e) => e instanceof IRError && /no output 'nope'/.test(e.message),
  );
  assert.throws(
    () => differentiate(f.graph, "vec"),
    (e) => e instanceof IRError && /float scalar/.test(e.message),
  );
  assert.throws(
    () => differentiate(f.graph, "loss", ["y"]),
    (e) => e instanceof IRError && /no param 'y'/.test(e.message),
  );
  f.graph.setOutput("grad.x", x);
  assert.throws(
    () => differentiate(f.graph, "loss"),
    (e) => e instanceof IRError && /already has an output/.test(e.message),
  );
});

Deno.test("gradcheck end to end: movement + reductions + matmul + gather chain", () => {
  const f = new Fixture("chain");
  const e = f.e;
  // Token embeddings (with a repeated id) plus a dense projection of per-token features.
  const table = f.param("table", [5, 4]);
  const ids = f.input("ids", [2, 3], "i32", [0, 3, 1, 3, 4, 0]);
  const emb = e.gather(table, ids); // [2,3,4]
  const feats = f.input("feats", [2, 3, 4]);
  const w = f.param("w", [4, 4]);
  const proj = e.reshape(e.matmul(e.reshape(feats, [6, 4]), w, false, true), [2, 3, 4]);
  const bias = f.param("bias", [4]);
  let h = e.add(e.add(emb, proj), e.broadcast(bias, [2, 3, 4]));
  h = e.node("tanh", [h]);
  // Softmax over the last axis, with the max subtracted through stop_gradient as in the DSL.
  const mx = e.node("stop_gradient", [e.node("reduce_max", [h], { axes: [2] })]);
  const ex = e.exp(e.sub(h, e.broadcast(mx, [2, 3, 4])));
  const sm = e.div(ex, e.broadcast(e.reduceSum(ex, [2]), [2, 3, 4]));
  // Attention-like batched matmul with transposes, then movement ops.
  const scores = e.matmul(sm, h, false, true); // [2,3,3]
  const perm = e.permute(scores, [2, 0, 1]); // [3,2,3]
  const sl = e.slice(perm, [1, 0, 0], [3, 2, 2]); // [2,2,2]
  const padded = e.pad(sl, [0, 1, 0], [1, 0, 1]); // [3,3,3]
  const cat = e.node("concat", [padded, perm, e.neg(padded)], { axis: 1 }); // [3,8,3]
  // reduce_max on values with no ties (the zeros from pad could tie), so finite differences are smooth.
  const peak = e.node("reduce_max", [perm], { axes: [1] }); // [3,1,3]
  const gamma = f.param("gamma", [3, 1, 3], Array.from({ length: 9 }, () => 0.5 + Math.random()));
  const y = e.mul(e.node("sqrt", [e.add(e.mul(peak, peak), gamma)]), e.reduceSum(cat, [1]));
  f.lossOf(y);
  const dg = differentiate(f.graph, "loss");
  assertValidGraph(dg);
  const got = evaluate(dg, f.feeds);
  for (const p of ["table", "w", "bias", "gamma"]) {
    assertClose(got.get(`grad.${p}`)!, finiteDiff(f.graph, f.feeds, p), `grad.${p}`, 1e-5, 1e-7);
  }
});

Deno.test("speed: a 24-layer transformer-shaped graph differentiates in linear time, well under 1 s", () => {
  const f = new Fixture("deep");
  const e = f.e;
  const [S, H, F] = [8, 16, 32];
  let x = f.input("x", [S, H]);
  for (let l = 0; l < 24; l++) {
    const p = (name: string, shape: number[]) => f.param(`l${l}.${name}`, shape, []);
    // Attention-ish block: q k v projections, softmax(q kᵀ), residual, norm-ish scaling.
    const [q, k, v] = ["q", "k", "v"].map((n) =>
      e.add(e.matmul(x, p(n, [H, H])), e.broadcast(p(`${n}_b`, [H]), [S, H]))
    );
    const s = e.matmul(q, k, false, true);
    const ex = e.exp(
      e.sub(s, e.broadcast(e.node("stop_gradient", [e.node("reduce_max", [s], { axes: [1] })]), [S, S])),
    );
    const a = e.matmul(e.div(ex, e.broadcast(e.reduceSum(ex, [1]), [S, S])), v);
    x = e.add(x, a);
    const mean = e.scale(e.reduceSum(x, [1]), 1 / H);
    const c = e.sub(x, e.broadcast(mean, [S, H]));
    const r = e.node("rsqrt", [
      e.add(e.scale(e.reduceSum(e.mul(c, c), [1]), 1 / H), e.full(1e-5, [S, 1], "f32")),
    ]);
    x = e.mul(e.mul(c, e.broadcast(r, [S, H])), e.broadcast(p("g", [H]), [S, H]));
    // MLP with a tanh-GELU-like nonlinearity and a residual.
    const u = e.matmul(x, p("w1", [H, F]));
    const gel = e.mul(
      e.scale(u, 0.5),
      e.add(e.full(1, [S, F], "f32"), e.node("tanh", [e.scale(u, 0.79788)])),
    );
    x = e.add(x, e.matmul(gel, p("w2", [F, H])));
  }
  f.lossOf(x);
  const fwd = f.graph.nodes.length;
  const times: number[] = [];
  let dg = f.graph;
  for (let i = 0; i < 5; i++) {
    const t0 = performance.now();
    dg = differentiate(f.graph, "loss");
    times.push(performance.now() - t0);
  }
  assertValidGraph(dg);
  const best = Math.min(...times);
  assert.ok(fwd > 1000, `the fixture should be big: ${fwd} nodes`);
  assert.ok(dg.nodes.length < 3 * fwd, `backward part is ${dg.nodes.length - fwd} nodes for ${fwd} forward`);
  assert.ok(best < 1000, `differentiate took ${best.toFixed(1)} ms on ${fwd} forward nodes`);
});
