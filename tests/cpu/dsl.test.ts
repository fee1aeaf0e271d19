/**
 * The model-building DSL: errors located in the model file, numpy broadcasting, number operands, axes,
 * reshape, reductions, the composites (checked numerically in f64 against loops written here from their
 * definitions), dropout's mask, and the BERT models (valid graphs, Hugging Face names and counts).
 */
import assert from "node:assert/strict";
import {
  crossEntropy,
  dropout,
  gelu,
  geluTanh,
  layerNorm,
  ModelBuilder,
  ModelError,
  softmax,
  type Tensor,
} from "../../dsl/mod.ts";
import { assertValidGraph, type Graph, numel } from "../../ir/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { uniformAt } from "../../numeric/philox.ts";
import * as bad from "../fixtures/models/bad_shapes.ts";
import bertTiny from "../../models/bert-tiny.ts";
import bertBase from "../../models/bert-base.ts";
import bertLarge from "../../models/bert-large.ts";
import type { BertModel, Head, Mode } from "../../models/bert.ts";
import { randn, seededRandom } from "../../cases/random.ts";

// ---- helpers --------------------------------------------------------------------------------------

const rng = seededRandom;

function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: number, what = ""): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    const err = Math.abs(actual[i] - expected[i]);
    if (!(err <= tol * Math.max(1, Math.abs(expected[i])))) {
      assert.fail(`${what}[${i}]: got ${actual[i]}, expected ${expected[i]} (error ${err})`);
    }
  }
}

/** Evaluates output `y` of the builder's graph in f64. */
function run(m: ModelBuilder, y: Tensor, feeds: Record<string, ArrayLike<number>>): Float64Array {
  m.output("y", y);
  return evaluate(m.graph, feeds, { precision: "f64", outputs: ["y"] }).get("y")!;
}

/** erf from its Maclaurin series, 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)); ~1e-14 for |x| <= 3. */
function erfSeries(x: number): number {
  let term = x, sum = x;
  for (let n = 1; n < 200; n++) {
    term *= (-x * x) / n;
    const add = term / (2 * n + 1);
    sum += add;
    if (Math.abs(add) < 1e-18 * Math.abs(sum)) break;
  }
  return (2 / Math.sqrt(Math.PI)) * sum;
}

// ---- errors name the op, the shapes and the model file line ---------------------------------------

const FIXTURE = "tests/fixtures/models/bad_shapes.ts";
const fixtureLines = Deno.readTextFileSync(new URL("../fixtures/models/bad_shapes.ts", import.meta.url))
  .split("\n");

/** The 1-based line of the fixture that carries `// @bad:<marker>`. */
function markerLine(marker: string): number {
  const hits = fixtureLines.flatMap((l, i) => (l.endsWith(`// @bad:${marker}`) ? [i + 1] : []));
  assert.equal(hits.length, 1, `marker @bad:${marker} appears once in the fixture`);
  return hits[0];
}

function modelError(f: () => void): ModelError {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof ModelError, `expected a ModelError, got ${e}`);
    return e;
  }
  assert.fail("no error was thrown while building");
}

Deno.test("dsl: shape and dtype errors name the op, the shapes and the model line", () => {
  const cases: [() => void, string, RegExp[]][] = [
    [bad.wrongMatmul, "matmul", [/^matmul: inner dims differ/, /f32\[2,3\]/, /f32\[4,5\]/]],
    [bad.wrongBroadcast, "broadcast", [/^add: /, /\[2,3\]/, /\[4\]/, /do not broadcast/]],
    [bad.intPlusFloat, "dtype", [/^add: /, /i32\[2,3\]/, /f32\[2,3\]/]],
    [bad.wrongReshape, "reshape", [/^reshape: cannot reshape f32\[2,3\] to \[4,2\]/]],
    [bad.wrongReshapeHole, "reshape-hole", [/^reshape: /, /\[2,3\]/, /\[4,-1\]/]],
    [bad.floatIndices, "gather", [/^gather: indices must be i32 or u32/, /f32\[10,4\]/, /f32\[3\]/]],
    [bad.halfTimesFloat, "matmul-dtype", [/^matmul: /, /f16\[2,3\]/, /f32\[3,4\]/]],
    [bad.wrongLayerNormGamma, "layernorm", [/^mul: /, /\[2,8\]/, /\[4\]/]],
    [bad.wrongAttentionMask, "attention-mask", [/^attention: mask/, /\[2,2,4,4\]/, /\[2,1,1,5\]/]],
  ];
  for (const [f, marker, res] of cases) {
    const e = modelError(f);
    for (const re of res) assert.match(e.message, re, marker);
    const at = `${FIXTURE}:${markerLine(marker)}`;
    assert.ok(e.message.includes(at), `${marker}: '${e.message}' should contain '${at}'`);
  }
});

Deno.test("dsl: an axis out of range names the op, the rank and the model line", () => {
  const e = modelError(bad.axisOutOfRange);
  assert.match(e.message, /^reduce_sum: axis 2 is out of range for rank 2/);
  assert.ok(e.message.includes(`${FIXTURE}:${markerLine("axis")}`), e.message);
});

Deno.test("dsl: crossEntropy's shape check names the shapes", () => {
  const e = modelError(bad.wrongLabels);
  assert.match(e.message, /^crossEntropy: /);
  assert.match(e.message, /\[4,3\]/);
  assert.match(e.message, /\[5\]/);
});

Deno.test({
  name: "dsl: crossEntropy's shape error names the model line",
  fn: () => {
    const e = modelError(bad.wrongLabels);
    assert.ok(e.message.includes(`${FIXTURE}:${markerLine("labels")}`), e.message);
  },
});

// ---- broadcasting, numbers, axes, reshape, reductions --------------------------------------------

Deno.test("dsl: numpy broadcasting inserts explicit broadcast nodes", () => {
  const m = new ModelBuilder("bc");
  const a = m.input("a", "f32", [2, 1, 3]);
  const b = m.input("b", "f32", [4, 1]);
  const c = a.add(b);
  assert.deepEqual(c.shape, [2, 4, 3]);
  const node = m.graph.nodes[c.id];
  assert.equal(node.op, "add");
  const [na, nb] = node.inputs.map((i) => m.graph.nodes[i]);
  assert.equal(na.op, "broadcast");
  assert.deepEqual(na.inputs, [a.id]);
  assert.deepEqual(na.attrs.shape, [2, 4, 3]);
  assert.equal(nb.op, "broadcast");
  assert.deepEqual(nb.inputs, [b.id]);
  assert.deepEqual(nb.attrs.shape, [2, 4, 3]);
  // Equal shapes need no broadcast.
  const d = c.mul(c);
  assert.deepEqual(m.graph.nodes[d.id].inputs, [c.id, c.id]);

  const r = rng(11);
  const av = randn(r, 6), bv = randn(r, 4);
  const got = run(m, c, { a: av, b: bv });
  const want: number[] = [];
  for (let i = 0; i < 2; i++) {
    for (let j = 0; j < 4; j++) for (let k = 0; k < 3; k++) want.push(av[i * 3 + k] + bv[j]);
  }
  assertClose(got, want, 0, "a + b");
});

Deno.test("dsl: numbers become const nodes of the other operand's dtype", () => {
  const m = new ModelBuilder("consts");
  const x = m.input("x", "i32", [3]);
  const y = x.mul(2);
  const [, k] = m.graph.nodes[y.id].inputs.map((i) => m.graph.nodes[i]);
  assert.equal(k.op, "const");
  assert.equal(k.attrs.value, 2);
  assert.deepEqual(k.type, { dtype: "i32", shape: [3] });
  const h = m.input("h", "f16", [2, 2]).add(0.5);
  const kh = m.graph.nodes[m.graph.nodes[h.id].inputs[1]];
  assert.deepEqual([kh.op, kh.attrs.value, kh.type.dtype], ["const", 0.5, "f16"]);
  const c = m.input("c", "bool", [3]);
  const w = m.where(c, y, -7);
  const kw = m.graph.nodes[m.graph.nodes[w.id].inputs[2]];
  assert.deepEqual([kw.op, kw.attrs.value, kw.type.dtype], ["const", -7, "i32"]);
  const cmp = m.input("f", "f32", [3]).gt(0);
  assert.equal(cmp.dtype, "bool");
  assert.equal(m.graph.nodes[m.graph.nodes[cmp.id].inputs[1]].type.dtype, "f32");

  m.output("w", w);
  const r = rng(12);
  const xv = Array.from({ length: 3 }, () => r.int(-50, 50) || 1);
  const out = evaluate(m.graph, { x: xv, c: [1, 0, 1] }, { outputs: ["w"] }).get("w")!;
  assert.deepEqual([...out], [xv[0] * 2, -7, xv[2] * 2]);
});

Deno.test("dsl: negative axes count from the end", () => {
  const m = new ModelBuilder("axes");
  const x = m.input("x", "f32", [2, 3, 4]);
  const attr = (t: Tensor, k: string) => m.graph.nodes[t.id].attrs[k];
  assert.deepEqual(attr(x.sum(-1), "axes"), [2]);
  assert.deepEqual(attr(x.max([-1, 0]), "axes"), [0, 2]);
  assert.deepEqual(attr(x.sum([-2, 1]), "axes"), [1]);
  assert.deepEqual(attr(x.permute([-1, 0, -2]), "perm"), [2, 0, 1]);
  const s = x.slice(-2, 1, 3);
  assert.deepEqual(s.shape, [2, 2, 4]);
  assert.deepEqual(attr(s, "start"), [0, 1, 0]);
  assert.deepEqual(x.transpose().shape, [2, 4, 3]);
  assert.deepEqual(m.concat([x, x], -1).shape, [2, 3, 8]);
  assert.throws(() => x.sum(-4), ModelError);
  assert.throws(() => x.permute([0, 1, 3]), ModelError);
});

Deno.test("dsl: reshape infers one -1 dimension", () => {
  const m = new ModelBuilder("reshape");
  const x = m.input("x", "f32", [2, 3, 4]);
  assert.deepEqual(x.reshape([-1, 4]).shape, [6, 4]);
  assert.deepEqual(x.reshape([2, -1]).shape, [2, 12]);
  assert.deepEqual(x.reshape([-1]).shape, [24]);
  assert.equal(x.reshape([2, 3, -1]), x, "a reshape to the same shape is the tensor itself");
  assert.throws(() => x.reshape([-1, -1]), ModelError);
  assert.throws(() => x.reshape([5, -1]), ModelError);
  const y = x.reshape([4, -1]);
  assert.equal(m.graph.nodes[y.id].op, "reshape");
  assert.deepEqual(m.graph.nodes[y.id].attrs.shape, [4, 6]);
  const xv = randn(rng(13), 24);
  assertClose(run(m, y, { x: xv }), xv, 0, "reshape keeps row-major order");
});

Deno.test("dsl: sum, max and mean, with and without kept dims", () => {
  const r = rng(14);
  const xv = randn(r, 3 * 4 * 5);
  const at = (i: number, j: number, k: number) => xv[(i * 4 + j) * 5 + k];
  const build = (f: (x: Tensor) => Tensor) => {
    const m = new ModelBuilder("reduce");
    const y = f(m.input("x", "f32", [3, 4, 5]));
    return { shape: y.shape, v: run(m, y, { x: xv }) };
  };
  const mean02: number[] = [], sum1: number[] = [], max2: number[] = [];
  for (let j = 0; j < 4; j++) {
    let s = 0;
    for (let i = 0; i < 3; i++) for (let k = 0; k < 5; k++) s += at(i, j, k);
    mean02.push(s / 15);
  }
  for (let i = 0; i < 3; i++) {
    for (let k = 0; k < 5; k++) {
      let s = 0;
      for (let j = 0; j < 4; j++) s += at(i, j, k);
      sum1.push(s);
    }
  }
  for (let i = 0; i < 3; i++) {
    for (let j = 0; j < 4; j++) {
      let mx = -Infinity;
      for (let k = 0; k < 5; k++) mx = Math.max(mx, at(i, j, k));
      max2.push(mx);
    }
  }
  const a = build((x) => x.mean([0, 2]));
  assert.deepEqual(a.shape, [1, 4, 1]);
  assertClose(a.v, mean02, 1e-14, "mean keepDims");
  const b = build((x) => x.mean([2, 0], false));
  assert.deepEqual(b.shape, [4]);
  assertClose(b.v, mean02, 1e-14, "mean");
  const c = build((x) => x.sum(1, false));
  assert.deepEqual(c.shape, [3, 5]);
  assertClose(c.v, sum1, 1e-14, "sum");
  const d = build((x) => x.max(-1, false));
  assert.deepEqual(d.shape, [3, 4]);
  assertClose(d.v, max2, 0, "max");
  const e = build((x) => x.sum([0, 1, 2], false));
  assert.deepEqual(e.shape, []);
  assertClose(e.v, [xv.reduce((s, v) => s + v, 0)], 1e-13, "sum all");
});

// ---- composites, in f64, against loops -------------------------------------------------------------

Deno.test("dsl: layerNorm matches its definition", () => {
  const r = rng(21);
  const [B, S, H] = [3, 5, 8];
  const eps = 1e-5;
  const xv = Float64Array.from({ length: B * S * H }, () => 3 * r.normal() + 1);
  const gv = randn(r, H), bv = randn(r, H);
  const m = new ModelBuilder("ln");
  const y = layerNorm(
    m.input("x", "f32", [B, S, H]),
    m.param("g", [H], "ones"),
    m.param("b", [H], "zeros"),
    eps,
  );
  assert.deepEqual(y.shape, [B, S, H]);
  const got = run(m, y, { x: xv, g: gv, b: bv });
  const want = new Float64Array(B * S * H);
  for (let row = 0; row < B * S; row++) {
    let mean = 0;
    for (let h = 0; h < H; h++) mean += xv[row * H + h];
    mean /= H;
    let v = 0;
    for (let h = 0; h < H; h++) v += (xv[row * H + h] - mean) ** 2;
    v /= H;
    for (let h = 0; h < H; h++) {
      want[row * H + h] = ((xv[row * H + h] - mean) / Math.sqrt(v + eps)) * gv[h] + bv[h];
    }
  }
  assertClose(got, want, 1e-12, "layerNorm");
});

Deno.test("dsl: gelu (erf form) and geluTanh match their definitions", () => {
  const r = rng(22);
  const n = 64;
  const xv = Float64Array.from({ length: n }, () => r.range(-3, 3));
  const m1 = new ModelBuilder("gelu");
  const g1 = run(m1, gelu(m1.input("x", "f32", [4, 16])), { x: xv });
  assertClose(g1, [...xv].map((x) => 0.5 * x * (1 + erfSeries(x / Math.SQRT2))), 1e-12, "gelu");
  const m2 = new ModelBuilder("gelu_tanh");
  const g2 = run(m2, geluTanh(m2.input("x", "f32", [4, 16])), { x: xv });
  const c = Math.sqrt(2 / Math.PI);
  assertClose(
    g2,
    [...xv].map((x) => 0.5 * x * (1 + Math.tanh(c * (x + 0.044715 * x ** 3)))),
    1e-12,
    "geluTanh",
  );
  // The two forms are close but not equal.
  assert.ok(g1.some((v, i) => v !== g2[i]));
});

Deno.test("dsl: softmax with an additive mask matches its definition", () => {
  const r = rng(23);
  const [B, Hh, S, K] = [2, 3, 4, 5];
  const xv = Float64Array.from({ length: B * Hh * S * K }, () => 4 * r.normal());
  // Mask [B, 1, 1, K]: 0 for keys to attend to, -10000 for padding (batch 1 pads its last two keys).
  const maskv = Float64Array.from({ length: B * K }, (_, i) => (i >= K && i % K >= K - 2 ? -10000 : 0));
  const m = new ModelBuilder("softmax");
  const y = softmax(m.input("x", "f32", [B, Hh, S, K]), -1, m.input("mask", "f32", [B, 1, 1, K]));
  const got = run(m, y, { x: xv, mask: maskv });
  const want = new Float64Array(xv.length);
  for (let row = 0; row < B * Hh * S; row++) {
    const b = Math.floor(row / (Hh * S));
    const z = Array.from({ length: K }, (_, k) => xv[row * K + k] + maskv[b * K + k]);
    const mx = Math.max(...z);
    const e = z.map((v) => Math.exp(v - mx));
    const s = e.reduce((a, v) => a + v, 0);
    e.forEach((v, k) => (want[row * K + k] = v / s));
  }
  assertClose(got, want, 1e-12, "masked softmax");
  for (let row = Hh * S; row < B * Hh * S; row++) {
    assert.ok(got[row * K + K - 1] < 1e-300, "masked keys get no weight");
  }

  // Over a middle axis, without a mask.
  const m2 = new ModelBuilder("softmax_axis1");
  const yv = randn(r, 2 * 3 * 4);
  const got2 = run(m2, softmax(m2.input("x", "f32", [2, 3, 4]), 1), { x: yv });
  for (let i = 0; i < 2; i++) {
    for (let k = 0; k < 4; k++) {
      const col = [0, 1, 2].map((j) => yv[(i * 3 + j) * 4 + k]);
      const s = col.reduce((a, v) => a + Math.exp(v), 0);
      for (let j = 0; j < 3; j++) {
        const w = Math.exp(col[j]) / s, g = got2[(i * 3 + j) * 4 + k];
        assert.ok(Math.abs(g - w) <= 1e-12, `softmax axis 1 [${i},${j},${k}]: ${g} vs ${w}`);
      }
    }
  }
});

Deno.test("dsl: crossEntropy with an ignore index matches its definition", () => {
  const r = rng(24);
  const [N, C] = [7, 5];
  const lv = Float64Array.from({ length: N * C }, () => 2 * r.normal());
  const argmax = (i: number) => {
    let best = 0;
    for (let c = 1; c < C; c++) if (lv[i * C + c] > lv[i * C + best]) best = c;
    return best;
  };
  // Rows 0 and 3 are right, rows 1 and 5 ignored, the others wrong.
  const labels = Array.from({ length: N }, (_, i) => {
    if (i === 1 || i === 5) return -1;
    if (i === 0 || i === 3) return argmax(i);
    return (argmax(i) + 1 + (i % (C - 1))) % C;
  });
  const m = new ModelBuilder("ce");
  const ce = crossEntropy(m.input("logits", "f32", [N, C]), m.input("labels", "i32", [N]), -1);
  assert.deepEqual([ce.loss.shape, ce.count.shape, ce.correct.shape], [[], [], []]);
  m.output("loss", ce.loss);
  m.output("count", ce.count);
  m.output("correct", ce.correct);
  const out = evaluate(m.graph, { logits: lv, labels }, { precision: "f64" });
  let total = 0, count = 0;
  for (let i = 0; i < N; i++) {
    if (labels[i] === -1) continue;
    let mx = -Infinity;
    for (let c = 0; c < C; c++) mx = Math.max(mx, lv[i * C + c]);
    let s = 0;
    for (let c = 0; c < C; c++) s += Math.exp(lv[i * C + c] - mx);
    total += mx + Math.log(s) - lv[i * C + labels[i]];
    count++;
  }
  assert.equal(count, 5);
  assertClose(out.get("loss")!, [total / count], 1e-12, "loss");
  assert.deepEqual([...out.get("count")!], [5]);
  assert.deepEqual([...out.get("correct")!], [2]);

  // A batch whose labels are all ignored gives loss 0, not NaN.
  const none = evaluate(m.graph, { logits: lv, labels: labels.map(() => -1) }, { precision: "f64" });
  assert.deepEqual([...none.get("loss")!], [0]);
  assert.deepEqual([...none.get("count")!], [0]);
});

// ---- dropout ---------------------------------------------------------------------------------------

Deno.test("dsl: dropout with p = 0 or without a key is the identity", () => {
  const m = new ModelBuilder("nodrop");
  const x = m.input("x", "f32", [4, 4]);
  const key = m.input("rng_key", "u32", [2]);
  const before = m.graph.nodes.length;
  assert.equal(dropout(x, 0, key), x);
  assert.equal(dropout(x, 0.5, undefined), x);
  assert.equal(m.graph.nodes.length, before, "no nodes were added");
  assert.throws(() => dropout(x, 1, key), ModelError);
  assert.throws(() => dropout(x, -0.1, key), ModelError);
});

function dropoutGraph(shape: number[], p: number) {
  const m = new ModelBuilder("drop");
  const x = m.input("x", "f32", shape);
  const key = m.input("rng_key", "u32", [2]);
  m.output("a", dropout(x, p, key));
  m.output("b", dropout(x, p, key));
  return m.graph;
}

Deno.test("dsl: dropout keeps about 1-p, scales by 1/(1-p), and draws a distinct stream per site", () => {
  const [R, Cn] = [200, 500];
  const p = 0.25;
  const g = dropoutGraph([R, Cn], p);
  const streams = g.nodes.filter((n) => n.op === "random_uniform").map((n) => n.attrs.stream);
  assert.equal(streams.length, 2);
  assert.notEqual(streams[0], streams[1]);

  const r = rng(31);
  const n = R * Cn;
  const xv = Float64Array.from({ length: n }, () => (r.uniform() < 0.5 ? -1 : 1) * r.range(0.5, 1.5));
  const seed = 1234567, step = 9;
  const out = evaluate(g, { x: xv, rng_key: [seed, step] }, { precision: "f64" });
  const a = out.get("a")!, b = out.get("b")!;
  let kept = 0, same = 0;
  for (let i = 0; i < n; i++) {
    if (a[i] !== 0) {
      kept++;
      assert.ok(Math.abs(a[i] - xv[i] / (1 - p)) <= 1e-15 * Math.abs(a[i]), `kept value ${i}`);
    }
    if ((a[i] !== 0) === (b[i] !== 0)) same++;
  }
  assert.ok(Math.abs(kept / n - (1 - p)) < 0.01, `kept fraction ${kept / n}`);
  // Independent masks agree on p^2 + (1-p)^2 = 62.5% of positions, not all of them.
  assert.ok(Math.abs(same / n - (p * p + (1 - p) ** 2)) < 0.01, `masks agree on ${same / n}`);
  // The mask is the project's convention: keep where uniformAt(seed, step, stream, i) >= p.
  for (let i = 0; i < 2000; i++) {
    assert.equal(a[i] !== 0, uniformAt(seed, step, streams[0] as number, i) >= p, `mask[${i}]`);
  }
});

Deno.test("dsl: the same key gives the same mask; another step or seed gives another", () => {
  const g = dropoutGraph([64, 64], 0.5);
  const r = rng(32);
  const xv = Float64Array.from({ length: 64 * 64 }, () => r.range(0.5, 1.5));
  const maskOf = (key: number[]) => [...evaluate(g, { x: xv, rng_key: key }).get("a")!].map((v) => v !== 0);
  const differ = (u: boolean[], v: boolean[]) => u.filter((k, i) => k !== v[i]).length / u.length;
  const m0 = maskOf([42, 3]);
  assert.deepEqual(maskOf([42, 3]), m0);
  assert.ok(differ(maskOf([42, 4]), m0) > 0.4, "another step");
  assert.ok(differ(maskOf([43, 3]), m0) > 0.4, "another seed");
});

// ---- BERT ---------------------------------------------------------------------------------------------

const MODELS: [string, BertModel][] = [["bert-tiny", bertTiny], ["bert-base", bertBase], [
  "bert-large",
  bertLarge,
]];
const HEADS: Head[] = ["pretraining", "classification", "qa"];
const MODES: Mode[] = ["train", "infer"];

function params(g: Graph): Map<string, readonly number[]> {
  return new Map([...g.sources("param")].map(([name, n]) => [name, n.type.shape]));
}

Deno.test("dsl: every BERT model builds a valid graph for every head and mode", () => {
  const outputs: Record<Head, Record<Mode, string[]>> = {
    pretraining: {
      train: ["loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy"],
      infer: ["prediction_logits", "seq_relationship_logits"],
    },
    classification: { train: ["loss", "accuracy"], infer: ["logits"] },
    qa: { train: ["loss"], infer: ["start_logits", "end_logits"] },
  };
  for (const [name, model] of MODELS) {
    for (const head of HEADS) {
      for (const mode of MODES) {
        const g = model.build({ head, mode, batchSize: 2, seqLen: 16 });
        assertValidGraph(g, `${name} ${head} ${mode}`);
        assert.deepEqual([...g.outputs.keys()], outputs[head][mode], `${name} ${head} ${mode}`);
        const inputs = [...g.sources("input").keys()];
        assert.deepEqual(inputs.slice(0, 3), ["input_ids", "token_type_ids", "attention_mask"]);
        assert.equal(inputs.includes("rng_key"), mode === "train", `${name} ${head} ${mode}: dropout key`);
        const drops = g.nodes.filter((n) => n.op === "random_uniform" || n.attrs.stream !== undefined);
        const L = model.config.num_hidden_layers;
        if (mode === "train") {
          // Embeddings, then per layer: attention probabilities, attention output, FFN output; the
          // classifier adds one on the pooled output.
          assert.equal(drops.length, 1 + 3 * L + (head === "classification" ? 1 : 0), `${name} ${head}`);
          assert.equal(new Set(drops.map((n) => n.attrs.stream)).size, drops.length, "distinct streams");
        } else assert.equal(drops.length, 0);
      }
    }
  }
  const g = bertTiny.build({ head: "pretraining", mode: "infer", batchSize: 3, seqLen: 8 });
  assert.deepEqual(g.node(g.outputs.get("prediction_logits")!).type, { dtype: "f32", shape: [3, 8, 30522] });
  assert.deepEqual(g.node(g.outputs.get("seq_relationship_logits")!).type, { dtype: "f32", shape: [3, 2] });
});

/**
 * Hugging Face's parameter count, from the architecture (modeling_bert.py): embeddings (word, position,
 * token type, LayerNorm), L layers of (Q, K, V, attention output dense, LayerNorm, intermediate dense,
 * output dense, LayerNorm), the pooler (not in BertForQuestionAnswering), and the head. The MLM decoder
 * weight is tied to the word embeddings and its bias is `cls.predictions.bias`, so neither counts again.
 */
function hfCount(
  c: { vocab_size: number; hidden_size: number; num_hidden_layers: number; intermediate_size: number } & {
    max_position_embeddings: number;
    type_vocab_size: number;
  },
  head: Head,
): number {
  const H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const dense = (o: number, i: number) => o * i + o;
  const ln = 2 * H;
  const emb = (V + c.max_position_embeddings + c.type_vocab_size) * H + ln;
  const layer = 4 * dense(H, H) + ln + dense(I, H) + dense(H, I) + ln;
  const pooler = dense(H, H);
  const body = emb + c.num_hidden_layers * layer;
  if (head === "pretraining") return body + pooler + dense(H, H) + ln + V + dense(2, H);
  if (head === "classification") return body + pooler + dense(2, H);
  return body + dense(2, H);
}

Deno.test("dsl: BERT parameters carry Hugging Face names and counts", () => {
  const g = bertBase.build({ head: "pretraining", mode: "train", batchSize: 2, seqLen: 128 });
  const p = params(g);
  const spot: [string, number[]][] = [
    ["bert.embeddings.word_embeddings.weight", [30522, 768]],
    ["bert.embeddings.position_embeddings.weight", [512, 768]],
    ["bert.embeddings.token_type_embeddings.weight", [2, 768]],
    ["bert.embeddings.LayerNorm.weight", [768]],
    ["bert.encoder.layer.0.attention.self.query.weight", [768, 768]],
    ["bert.encoder.layer.5.attention.self.value.bias", [768]],
    ["bert.encoder.layer.11.attention.output.dense.weight", [768, 768]],
    ["bert.encoder.layer.11.attention.output.LayerNorm.bias", [768]],
    ["bert.encoder.layer.3.intermediate.dense.weight", [3072, 768]],
    ["bert.encoder.layer.3.output.dense.weight", [768, 3072]],
    ["bert.encoder.layer.11.output.LayerNorm.weight", [768]],
    ["bert.pooler.dense.weight", [768, 768]],
    ["cls.predictions.transform.dense.weight", [768, 768]],
    ["cls.predictions.transform.LayerNorm.bias", [768]],
    ["cls.predictions.bias", [30522]],
    ["cls.seq_relationship.weight", [2, 768]],
    ["cls.seq_relationship.bias", [2]],
  ];
  for (const [name, shape] of spot) assert.deepEqual(p.get(name), shape, name);
  assert.ok(!p.has("cls.predictions.decoder.weight"), "the decoder is tied to the word embeddings");
  assert.ok(!p.has("bert.encoder.layer.12.output.dense.weight"));
  // 5 embedding tensors, 16 per layer, pooler 2, transform 2 + LayerNorm 2, decoder bias 1, NSP 2.
  assert.equal(p.size, 5 + 16 * 12 + 2 + 4 + 1 + 2);
  for (const name of p.keys()) assert.match(name, /^(bert\.(embeddings|encoder\.layer\.\d+|pooler)|cls)\./);

  const total = [...p.values()].reduce((s, shape) => s + numel(shape), 0);
  assert.equal(total, 110_106_428, "Hugging Face's BertForPreTraining count for bert-base-uncased");
  assert.equal(hfCount(bertBase.config, "pretraining"), 110_106_428);

  for (const [name, model] of MODELS) {
    for (const head of HEADS) {
      const gp = params(model.build({ head, mode: "infer", batchSize: 1, seqLen: 8 }));
      const n = [...gp.values()].reduce((s, shape) => s + numel(shape), 0);
      assert.equal(n, hfCount(model.config, head), `${name} ${head}`);
      assert.equal(gp.has("bert.pooler.dense.weight"), head !== "qa", `${name} ${head}: pooler`);
    }
  }
  const cls = params(bertBase.build({ head: "classification", mode: "infer", batchSize: 1, seqLen: 8 }));
  assert.deepEqual(cls.get("classifier.weight"), [2, 768]);
  const qa = params(bertBase.build({ head: "qa", mode: "infer", batchSize: 1, seqLen: 8 }));
  assert.deepEqual(qa.get("qa_outputs.weight"), [2, 768]);
  assert.equal(hfCount(bertBase.config, "classification"), 109_483_778);
});

Deno.test("dsl: a sequence longer than max_position_embeddings is a ModelError", () => {
  assert.throws(
    () => bertBase.build({ head: "pretraining", mode: "infer", batchSize: 1, seqLen: 513 }),
    (e: unknown) =>
      e instanceof ModelError && /sequence length 513 exceeds max_position_embeddings 512/.test(e.message),
  );
  assert.throws(() => bertTiny.build({ head: "qa", mode: "train", batchSize: 0, seqLen: 8 }), ModelError);
  const g = bertTiny.build({ head: "qa", mode: "infer", batchSize: 1, seqLen: 512 });
  assertValidGraph(g);
});
