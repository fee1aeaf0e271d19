/**
 * The reference interpreter, op by op, against values computed here with plain loops on seeded random
 * inputs; its precision modes (f32 rounding, f16/bf16 storage rounding); erf against high-precision
 * values; and the errors of `evaluate`.
 */
import assert from "node:assert/strict";
import { type DType, Graph, IRError, type NodeId, type TensorType } from "../../ir/mod.ts";
import { evaluate, type Precision } from "../../runtime/reference/interpreter.ts";
import { erf } from "../../numeric/erf.ts";
import { roundBF16 } from "../../numeric/half.ts";
import { uniformAt } from "../../numeric/philox.ts";
import { randn, seededRandom } from "../../cases/random.ts";

// ---- helpers --------------------------------------------------------------------------------------

const rng = seededRandom;
const T = (dtype: DType, shape: number[]): TensorType => ({ dtype, shape });
const size = (shape: number[]) => shape.reduce((a, b) => a * b, 1);

/** Row-major flat index of `idx` in `shape`. */
function flat(shape: readonly number[], idx: readonly number[]): number {
  let f = 0;
  for (let d = 0; d < shape.length; d++) f = f * shape[d] + idx[d];
  return f;
}

/** Every index tuple of `shape`, in row-major order. */
function* indices(shape: readonly number[]): Generator<number[]> {
  const n = size([...shape]);
  const idx = new Array<number>(shape.length).fill(0);
  for (let i = 0; i < n; i++) {
    yield [...idx];
    for (let d = shape.length - 1; d >= 0; d--) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

function inp(g: Graph, name: string, dtype: DType, shape: number[]): NodeId {
  return g.add("input", [], { name }, T(dtype, shape));
}

/** Evaluates node `id` as output "y". */
function run(
  g: Graph,
  id: NodeId,
  feeds: Record<string, ArrayLike<number>>,
  precision: Precision = "f64",
): Float64Array {
  g.setOutput("y", id);
  return evaluate(g, feeds, { precision, outputs: ["y"] }).get("y")!;
}

function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: number, what = ""): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    const err = Math.abs(actual[i] - expected[i]);
    if (!(err <= tol * Math.max(1, Math.abs(expected[i])))) {
      assert.fail(`${what}[${i}]: got ${actual[i]}, expected ${expected[i]} (error ${err})`);
    }
  }
}

// ---- movement ops ---------------------------------------------------------------------------------

Deno.test("interpreter: broadcast of inserted and size-1 dims", () => {
  const r = rng(1);
  const cases: [number[], number[]][] = [[[3, 1], [2, 3, 4]], [[4], [2, 3, 4]], [[1, 3, 1], [2, 3, 5]], [[], [
    2,
    2,
  ]]];
  for (const [from, to] of cases) {
    const g = new Graph("broadcast");
    const x = inp(g, "x", "f32", from);
    const xv = randn(r, size(from));
    const got = run(g, g.add("broadcast", [x], { shape: to }), { x: xv });
    const off = to.length - from.length;
    const want = [...indices(to)].map((o) => xv[flat(from, from.map((d, i) => (d === 1 ? 0 : o[off + i])))]);
    assert.deepEqual([...got], want, `[${from}] -> [${to}]`);
  }
});

Deno.test("interpreter: permute of rank 4", () => {
  const shape = [2, 3, 4, 5], perm = [2, 0, 3, 1];
  const g = new Graph("permute");
  const xv = randn(rng(2), size(shape));
  const y = g.add("permute", [inp(g, "x", "f32", shape)], { perm });
  const outShape = perm.map((p) => shape[p]);
  assert.deepEqual(g.nodes[y].type.shape, [4, 2, 5, 3]);
  const got = run(g, y, { x: xv });
  const want = [...indices(outShape)].map((o) => {
    const src = new Array<number>(4);
    perm.forEach((p, i) => (src[p] = o[i]));
    return xv[flat(shape, src)];
  });
  assert.deepEqual([...got], want);
});

Deno.test("interpreter: slice and pad on two axes", () => {
  const r = rng(3);
  const shape = [4, 5, 6];
  const xv = randn(r, size(shape));
  const g = new Graph("slice");
  const start = [1, 0, 2], end = [3, 5, 5];
  const got = run(g, g.add("slice", [inp(g, "x", "f32", shape)], { start, end }), { x: xv });
  const want: number[] = [];
  for (let i = 1; i < 3; i++) {
    for (let j = 0; j < 5; j++) for (let k = 2; k < 5; k++) want.push(xv[flat(shape, [i, j, k])]);
  }
  assert.deepEqual([...got], want);

  const ps = [2, 3];
  const pv = Float64Array.from({ length: 6 }, () => r.range(1, 2));
  const h = new Graph("pad");
  const low = [1, 2], high = [2, 1];
  const y = h.add("pad", [inp(h, "x", "f32", ps)], { low, high });
  assert.deepEqual(h.nodes[y].type.shape, [5, 6]);
  const padded = run(h, y, { x: pv });
  for (let i = 0; i < 5; i++) {
    for (let j = 0; j < 6; j++) {
      const inside = i >= 1 && i < 3 && j >= 2 && j < 5;
      assert.equal(padded[i * 6 + j], inside ? pv[(i - 1) * 3 + (j - 2)] : 0, `pad [${i},${j}]`);
    }
  }
});

Deno.test("interpreter: concat of three parts on the middle axis", () => {
  const r = rng(4);
  const shapes = [[2, 1, 4], [2, 3, 4], [2, 2, 4]];
  const vals = shapes.map((s) => randn(r, size(s)));
  const g = new Graph("concat");
  const ids = shapes.map((s, p) => inp(g, `p${p}`, "f32", s));
  const y = g.add("concat", ids, { axis: 1 });
  assert.deepEqual(g.nodes[y].type.shape, [2, 6, 4]);
  const got = run(g, y, { p0: vals[0], p1: vals[1], p2: vals[2] });
  const want: number[] = [];
  for (let i = 0; i < 2; i++) {
    for (let p = 0; p < 3; p++) {
      for (let j = 0; j < shapes[p][1]; j++) {
        for (let k = 0; k < 4; k++) want.push(vals[p][flat(shapes[p], [i, j, k])]);
      }
    }
  }
  assert.deepEqual([...got], want);
});

// ---- reductions -----------------------------------------------------------------------------------

Deno.test("interpreter: reduce_sum and reduce_max over several axes keep dims", () => {
  const r = rng(5);
  const cases: [number[], number[]][] = [
    [[3, 4, 5], [0, 2]],
    [[2, 3, 4, 5], [1, 3]],
    [[2, 3, 4], [0, 1, 2]],
    [
      [6, 7],
      [1],
    ],
  ];
  for (const [shape, axes] of cases) {
    // All negative, so a maximum that starts from 0 would show.
    const xv = Float64Array.from({ length: size(shape) }, () => r.normal() - 10);
    const outShape = shape.map((d, i) => (axes.includes(i) ? 1 : d));
    const sum = new Float64Array(size(outShape));
    const max = new Float64Array(size(outShape)).fill(-Infinity);
    for (const idx of indices(shape)) {
      const o = flat(outShape, idx.map((v, i) => (axes.includes(i) ? 0 : v)));
      const v = xv[flat(shape, idx)];
      sum[o] += v;
      max[o] = Math.max(max[o], v);
    }
    for (const [op, want] of [["reduce_sum", sum], ["reduce_max", max]] as const) {
      const g = new Graph(op);
      const y = g.add(op, [inp(g, "x", "f32", shape)], { axes });
      assert.deepEqual(g.nodes[y].type.shape, outShape);
      assertClose(run(g, y, { x: xv }), want, 1e-14, `${op} [${shape}] over [${axes}]`);
    }
  }
});

// ---- matmul -----------------------------------------------------------------------------------------

Deno.test("interpreter: matmul with every transpose combination and batch dims", () => {
  const r = rng(6);
  for (const batch of [[2], [2, 3]]) {
    const [m, k, n] = [3, 4, 5];
    for (const ta of [false, true]) {
      for (const tb of [false, true]) {
        const aShape = [...batch, ...(ta ? [k, m] : [m, k])];
        const bShape = [...batch, ...(tb ? [n, k] : [k, n])];
        const av = randn(r, size(aShape)), bv = randn(r, size(bShape));
        const g = new Graph("matmul");
        const y = g.add("matmul", [inp(g, "a", "f32", aShape), inp(g, "b", "f32", bShape)], {
          transpose_a: ta,
          transpose_b: tb,
        });
        assert.deepEqual(g.nodes[y].type.shape, [...batch, m, n]);
        const got = run(g, y, { a: av, b: bv });
        const want: number[] = [];
        for (const bi of indices(batch)) {
          for (let i = 0; i < m; i++) {
            for (let j = 0; j < n; j++) {
              let s = 0;
              for (let p = 0; p < k; p++) {
                const a = av[flat(aShape, [...bi, ...(ta ? [p, i] : [i, p])])];
                const b = bv[flat(bShape, [...bi, ...(tb ? [j, p] : [p, j])])];
                s += a * b;
              }
              want.push(s);
            }
          }
        }
        assertClose(got, want, 1e-14, `matmul batch [${batch}] ta=${ta} tb=${tb}`);
      }
    }
  }
});

// ---- gather, scatter_add, iota ----------------------------------------------------------------------

Deno.test("interpreter: gather picks rows, with repeats", () => {
  const r = rng(7);
  const tv = randn(r, 5 * 3);
  const idx = [4, 0, 4, 2, 2, 1];
  for (const dtype of ["i32", "u32"] as const) {
    const g = new Graph("gather");
    const y = g.add("gather", [inp(g, "t", "f32", [5, 3]), inp(g, "i", dtype, [2, 3])]);
    assert.deepEqual(g.nodes[y].type.shape, [2, 3, 3]);
    const got = run(g, y, { t: tv, i: idx });
    const want = idx.flatMap((row) => [tv[row * 3], tv[row * 3 + 1], tv[row * 3 + 2]]);
    assert.deepEqual([...got], want, dtype);
  }
});

Deno.test("interpreter: scatter_add accumulates repeated indices", () => {
  const r = rng(8);
  const idx = [1, 3, 1, 1];
  const uv = randn(r, 4 * 3);
  const g = new Graph("scatter");
  const y = g.add("scatter_add", [inp(g, "i", "i32", [2, 2]), inp(g, "u", "f32", [2, 2, 3])], { rows: 5 });
  assert.deepEqual(g.nodes[y].type.shape, [5, 3]);
  const got = run(g, y, { i: idx, u: uv });
  const want = new Array<number>(15).fill(0);
  idx.forEach((row, k) => {
    for (let c = 0; c < 3; c++) want[row * 3 + c] += uv[k * 3 + c];
  });
  assertClose(got, want, 1e-15, "scatter_add");
  // Row 1 got three updates; rows 0, 2 and 4 none.
  assert.equal(got[3], uv[0] + uv[6] + uv[9]);
  assert.deepEqual([got[0], got[7], got[14]], [0, 0, 0]);
});

Deno.test("interpreter: an out-of-range index is a RangeError naming the op", () => {
  const g = new Graph("oob");
  const t = inp(g, "t", "f32", [5, 2]);
  const i = inp(g, "i", "i32", [3]);
  const y = g.add("gather", [t, i]);
  const feeds = { t: randn(rng(9), 10), i: [0, 5, 1] };
  assert.throws(() => run(g, y, feeds), (e: unknown) => {
    assert.ok(e instanceof RangeError);
    assert.match(e.message, /^gather %2: index 5 is outside \[0, 5\)/);
    return true;
  });
  assert.throws(() => run(g, y, { ...feeds, i: [0, -1, 1] }), /gather %2: index -1/);

  const h = new Graph("oob2");
  const s = h.add("scatter_add", [inp(h, "i", "i32", [2]), inp(h, "u", "f32", [2, 2])], { rows: 3 });
  assert.throws(() => run(h, s, { i: [0, 3], u: [1, 2, 3, 4] }), (e: unknown) => {
    assert.ok(e instanceof RangeError);
    assert.match(e.message, /^scatter_add %2: index 3 is outside \[0, 3\)/);
    return true;
  });
});

Deno.test("interpreter: iota counts along its axis", () => {
  const shape = [2, 3, 4];
  for (const [axis, dtype] of [[0, "i32"], [1, "u32"], [2, "i32"]] as const) {
    const g = new Graph("iota");
    const got = run(g, g.add("iota", [], { axis }, T(dtype, shape)), {});
    assert.deepEqual([...got], [...indices(shape)].map((idx) => idx[axis]), `axis ${axis}`);
  }
});

// ---- elementwise ops ------------------------------------------------------------------------------

Deno.test("interpreter: unary and binary float ops match Math", () => {
  const r = rng(10);
  const n = 40;
  const pos = Float64Array.from({ length: n }, () => r.range(0.1, 5));
  const any = randn(r, n);
  const other = randn(r, n);
  const unary: [string, (x: number) => number, Float64Array][] = [
    ["neg", (x) => -x, any],
    ["abs", Math.abs, any],
    ["exp", Math.exp, any],
    ["log", Math.log, pos],
    ["tanh", Math.tanh, any],
    ["sqrt", Math.sqrt, pos],
    ["rsqrt", (x) => 1 / Math.sqrt(x), pos],
    ["reciprocal", (x) => 1 / x, any],
    ["stop_gradient", (x) => x, any],
  ];
  for (const [op, f, xv] of unary) {
    const g = new Graph(op);
    const got = run(g, g.add(op, [inp(g, "x", "f32", [n])]), { x: xv });
    assertClose(got, [...xv].map(f), 1e-15, op);
  }
  const binary: [string, (a: number, b: number) => number][] = [
    ["add", (a, b) => a + b],
    ["sub", (a, b) => a - b],
    ["mul", (a, b) => a * b],
    ["div", (a, b) => a / b],
    ["max", (a, b) => (a > b ? a : b)],
    ["min", (a, b) => (a < b ? a : b)],
  ];
  for (const [op, f] of binary) {
    const g = new Graph(op);
    const got = run(g, g.add(op, [inp(g, "a", "f32", [n]), inp(g, "b", "f32", [n])]), { a: any, b: other });
    assertClose(got, [...any].map((a, i) => f(a, other[i])), 1e-15, op);
  }
  // max and min propagate NaN.
  const g = new Graph("nan");
  const a = inp(g, "a", "f32", [3]), b = inp(g, "b", "f32", [3]);
  g.setOutput("max", g.add("max", [a, b]));
  g.setOutput("min", g.add("min", [a, b]));
  const out = evaluate(g, { a: [NaN, 1, 2], b: [1, NaN, 3] });
  assert.deepEqual([...out.get("max")!], [NaN, NaN, 3]);
  assert.deepEqual([...out.get("min")!], [NaN, NaN, 2]);
});

Deno.test("interpreter: cast truncates toward zero, wraps i32, and maps bool to 0/1", () => {
  const r = rng(11);
  const xs = [
    -2.7,
    -0.5,
    0.5,
    2.99,
    -3,
    7,
    2 ** 31 + 5,
    ...Array.from({ length: 20 }, () => r.range(-100, 100)),
  ];
  const g = new Graph("cast");
  const x = inp(g, "x", "f32", [xs.length]);
  g.setOutput("i32", g.add("cast", [x], { to: "i32" }));
  g.setOutput("bool", g.add("cast", [x], { to: "bool" }));
  const out = evaluate(g, { x: xs });
  // "+ 0" turns -0 into 0: integers have no negative zero.
  const trunc = (v: number) => (v < 0 ? -Math.floor(-v) : Math.floor(v)) + 0;
  const wantI32 = xs.map((v) => (Math.abs(v) < 2 ** 31 ? trunc(v) : trunc(v) - 2 ** 32));
  assert.deepEqual([...out.get("i32")!], [-2, 0, 0, 2, -3, 7, -(2 ** 31) + 5, ...wantI32.slice(7)]);
  assert.deepEqual([...out.get("i32")!], wantI32);
  assert.ok(out.get("bool")!.every((v) => v === 1), "every nonzero value is true");

  const h = new Graph("cast_bool");
  const b = inp(h, "b", "f32", [5]);
  h.setOutput("bool", h.add("cast", [b], { to: "bool" }));
  const fromBool = h.add("cast", [h.add("input", [], { name: "c" }, T("bool", [3]))], { to: "f32" });
  h.setOutput("f32", fromBool);
  const fromInt = h.add("cast", [inp(h, "k", "i32", [3])], { to: "f32" });
  h.setOutput("int", fromInt);
  const out2 = evaluate(h, { b: [0, -0, 0.25, -3, 1e-30], c: [1, 0, 1], k: [-5, 0, 123456789] });
  assert.deepEqual([...out2.get("bool")!], [0, 0, 1, 1, 1]);
  assert.deepEqual([...out2.get("f32")!], [1, 0, 1]);
  assert.deepEqual([...out2.get("int")!], [-5, 0, 123456789]);
});

Deno.test("interpreter: where selects elementwise", () => {
  const r = rng(12);
  const n = 30;
  const c = Array.from({ length: n }, () => (r.uniform() < 0.5 ? 1 : 0));
  const av = randn(r, n), bv = randn(r, n);
  const g = new Graph("where");
  const y = g.add("where", [inp(g, "c", "bool", [n]), inp(g, "a", "f32", [n]), inp(g, "b", "f32", [n])]);
  const got = run(g, y, { c, a: av, b: bv });
  assert.deepEqual([...got], c.map((k, i) => (k === 1 ? av[i] : bv[i])));
  assert.ok(c.includes(0) && c.includes(1));
});

Deno.test("interpreter: comparisons and logic give 0/1", () => {
  const r = rng(13);
  const n = 50;
  const av = Array.from({ length: n }, () => r.int(-3, 4));
  const bv = Array.from({ length: n }, () => r.int(-3, 4));
  assert.ok(av.some((a, i) => a === bv[i]), "some pairs are equal");
  const ops: [string, (a: number, b: number) => boolean][] = [
    ["eq", (a, b) => a === b],
    ["ne", (a, b) => a !== b],
    ["lt", (a, b) => a < b],
    ["le", (a, b) => a <= b],
    ["gt", (a, b) => a > b],
    ["ge", (a, b) => a >= b],
  ];
  for (const [op, f] of ops) {
    const g = new Graph(op);
    const y = g.add(op, [inp(g, "a", "i32", [n]), inp(g, "b", "i32", [n])]);
    assert.equal(g.nodes[y].type.dtype, "bool");
    assert.deepEqual([...run(g, y, { a: av, b: bv })], av.map((a, i) => (f(a, bv[i]) ? 1 : 0)), op);
  }
  // IEEE: NaN is unequal to everything, itself included.
  const g = new Graph("nan_cmp");
  const a = inp(g, "a", "f32", [2]), b = inp(g, "b", "f32", [2]);
  for (const op of ["eq", "ne", "lt", "ge"]) g.setOutput(op, g.add(op, [a, b]));
  const out = evaluate(g, { a: [NaN, NaN], b: [NaN, 1] });
  assert.deepEqual([...out.get("eq")!], [0, 0]);
  assert.deepEqual([...out.get("ne")!], [1, 1]);
  assert.deepEqual([...out.get("lt")!], [0, 0]);
  assert.deepEqual([...out.get("ge")!], [0, 0]);

  const h = new Graph("logic");
  const p = inp(h, "p", "bool", [4]), q = inp(h, "q", "bool", [4]);
  h.setOutput("and", h.add("and", [p, q]));
  h.setOutput("or", h.add("or", [p, q]));
  h.setOutput("not", h.add("not", [p]));
  const lo = evaluate(h, { p: [0, 0, 1, 1], q: [0, 1, 0, 1] });
  assert.deepEqual([...lo.get("and")!], [0, 0, 0, 1]);
  assert.deepEqual([...lo.get("or")!], [0, 1, 1, 1]);
  assert.deepEqual([...lo.get("not")!], [1, 1, 0, 0]);
});

Deno.test("interpreter: integer division truncates toward zero; i32 arithmetic wraps", () => {
  const r = rng(14);
  const n = 60;
  const av = Array.from({ length: n }, () => r.int(-100, 101));
  const bv = Array.from({ length: n }, () => (r.uniform() < 0.5 ? -1 : 1) * r.int(1, 10));
  av.push(-7, 7, -7, -8);
  bv.push(2, -2, -2, 2);
  const g = new Graph("idiv");
  const y = g.add("div", [inp(g, "a", "i32", [n + 4]), inp(g, "b", "i32", [n + 4])]);
  const got = run(g, y, { a: av, b: bv });
  const want = av.map((a, i) => {
    const q = Math.floor(Math.abs(a) / Math.abs(bv[i]));
    return (a < 0) !== (bv[i] < 0) && q !== 0 ? -q : q;
  });
  assert.deepEqual([...got], want);
  assert.deepEqual([...got.slice(n)], [-3, -3, 3, -4]);

  const h = new Graph("wrap");
  const s = h.add("add", [inp(h, "a", "i32", [2]), inp(h, "b", "i32", [2])]);
  h.setOutput("s", s);
  const u = h.add("sub", [inp(h, "c", "u32", [1]), inp(h, "d", "u32", [1])]);
  h.setOutput("u", u);
  for (const precision of ["f64", "f32"] as const) {
    const out = evaluate(h, { a: [2147483647, 16777216], b: [1, 1], c: [0], d: [1] }, { precision });
    // 2^24 + 1 is not an f32, so an i32 node must not be rounded like one.
    assert.deepEqual([...out.get("s")!], [-2147483648, 16777217], precision);
    assert.deepEqual([...out.get("u")!], [4294967295], precision);
  }
});

Deno.test("interpreter: const and random_uniform", () => {
  const g = new Graph("sources");
  g.setOutput("c", g.add("const", [], { value: -2.5 }, T("f32", [2, 3])));
  const key = inp(g, "key", "u32", [2]);
  g.setOutput("r", g.add("random_uniform", [key], { stream: 5 }, T("f32", [3, 7])));
  const out = evaluate(g, { key: [77, 3] });
  assert.deepEqual([...out.get("c")!], [-2.5, -2.5, -2.5, -2.5, -2.5, -2.5]);
  const rv = out.get("r")!;
  assert.equal(rv.length, 21);
  rv.forEach((v, i) => assert.equal(v, uniformAt(77, 3, 5, i), `uniform ${i}`));
  assert.ok(rv.every((v) => v >= 0 && v < 1));
  assert.ok(new Set(rv).size > 15);
});

// ---- precision --------------------------------------------------------------------------------------

Deno.test("interpreter: f32 mode rounds f32 results; f64 mode does not", () => {
  const g = new Graph("tenths");
  const y = g.add("add", [inp(g, "a", "f32", [1]), inp(g, "b", "f32", [1])]);
  const f32 = run(g, y, { a: [0.1], b: [0.2] }, "f32");
  assert.equal(f32[0], Math.fround(Math.fround(0.1) + Math.fround(0.2)));
  assert.equal(run(g, y, { a: [0.1], b: [0.2] }, "f64")[0], 0.1 + 0.2);
  assert.notEqual(f32[0], 0.1 + 0.2);

  // exp(a * b + a), rounded after every op in f32 mode.
  const r = rng(15);
  const n = 50;
  const av = randn(r, n), bv = randn(r, n);
  const h = new Graph("chain");
  const a = inp(h, "a", "f32", [n]), b = inp(h, "b", "f32", [n]);
  const z = h.add("exp", [h.add("add", [h.add("mul", [a, b]), a])]);
  const got32 = run(h, z, { a: av, b: bv }, "f32");
  const got64 = evaluate(h, { a: av, b: bv }, { precision: "f64" }).get("y")!;
  const f = Math.fround;
  for (let i = 0; i < n; i++) {
    const fa = f(av[i]), fb = f(bv[i]);
    assert.equal(got32[i], f(Math.exp(f(f(fa * fb) + fa))), `f32 ${i}`);
    assert.equal(got64[i], Math.exp(av[i] * bv[i] + av[i]), `f64 ${i}`);
  }
  assert.ok(got32.some((v, i) => v !== got64[i]));
  // Matmul and reductions accumulate in f64 and round once.
  const m = new Graph("dot");
  const d = m.add("reduce_sum", [m.add("mul", [inp(m, "a", "f32", [n]), inp(m, "b", "f32", [n])])], {
    axes: [0],
  });
  let acc = 0;
  for (let i = 0; i < n; i++) acc += f(f(av[i]) * f(bv[i]));
  assert.equal(run(m, d, { a: av, b: bv }, "f32")[0], f(acc));
});

Deno.test("interpreter: f16 and bf16 nodes round after every op in both modes", () => {
  const r = rng(16);
  const n = 50;
  const av = Float64Array.from({ length: n }, () => 3 * r.normal());
  const bv = Float64Array.from({ length: n }, () => 3 * r.normal());
  const rounders: [DType, (x: number) => number][] = [["f16", Math.f16round], ["bf16", roundBF16]];
  for (const [dtype, round] of rounders) {
    const g = new Graph(dtype);
    const a = inp(g, "a", dtype, [n]), b = inp(g, "b", dtype, [n]);
    // tanh((a + b) * a) / b
    const y = g.add("div", [g.add("tanh", [g.add("mul", [g.add("add", [a, b]), a])]), b]);
    const want = [...av].map((x, i) => {
      const ra = round(x), rb = round(bv[i]);
      return round(round(Math.tanh(round(round(ra + rb) * ra))) / rb);
    });
    for (const precision of ["f64", "f32"] as const) {
      const got = run(g, y, { a: av, b: bv }, precision);
      assert.deepEqual([...got], want, `${dtype} in ${precision} mode`);
    }
    // Not the same as computing in double and rounding once at the end.
    const once = [...av].map((x, i) => round(Math.tanh((x + bv[i]) * x) / bv[i]));
    assert.ok(want.some((v, i) => v !== once[i]), `${dtype}: per-op rounding is observable`);

    // A matmul rounds once, after an f64 accumulation.
    const m = new Graph(`${dtype}_matmul`);
    const mm = m.add("matmul", [inp(m, "a", dtype, [5, 10]), inp(m, "b", dtype, [10, 5])], {
      transpose_a: false,
      transpose_b: false,
    });
    const got = run(m, mm, { a: av, b: bv }, "f64");
    for (let i = 0; i < 5; i++) {
      for (let j = 0; j < 5; j++) {
        let s = 0;
        for (let p = 0; p < 10; p++) s += round(av[i * 10 + p]) * round(bv[p * 5 + j]);
        assert.equal(got[i * 5 + j], round(s), `${dtype} matmul [${i},${j}]`);
      }
    }
  }
  // A cast to f16 rounds even in f64 mode; the cast back is exact.
  const c = new Graph("cast16");
  const back = c.add("cast", [c.add("cast", [inp(c, "x", "f32", [n])], { to: "f16" })], { to: "f32" });
  assert.deepEqual([...run(c, back, { x: av }, "f64")], [...av].map(Math.f16round));
});

Deno.test("interpreter: feeds are not modified by rounding", () => {
  const g = new Graph("feeds");
  const x = inp(g, "x", "f16", [3]);
  const feed = Float64Array.of(0.1, 0.2, 0.3);
  const y = g.add("reshape", [x], { shape: [3, 1] });
  assert.deepEqual([...run(g, y, { x: feed }, "f32")], [0.1, 0.2, 0.3].map(Math.f16round));
  assert.deepEqual([...feed], [0.1, 0.2, 0.3]);
});

// ---- erf --------------------------------------------------------------------------------------------

// erf to 40 digits (mpmath), rounded here to 20 significant digits.
const ERF_VALUES: [number, number][] = [
  [0.1, 0.11246291601828489220],
  [0.5, 0.5204998778130465377],
  [1, 0.8427007929497148693],
  [1.5, 0.96610514647531072707],
  [2, 0.9953222650189527342],
  [2.5, 0.99959304798255504106],
  [3, 0.9999779095030014146],
  [4, 0.99999998458274209972],
  [5, 0.99999999999846254021],
];

Deno.test("erf: matches high-precision values to 4e-16 relative", () => {
  for (const [x, want] of ERF_VALUES) {
    const got = erf(x);
    assert.ok(Math.abs(got - want) <= 4e-16 * Math.abs(want), `erf(${x}) = ${got}, expected ${want}`);
    assert.ok(Math.abs(erf(-x) + want) <= 4e-16 * Math.abs(want), `erf(${-x})`);
  }
  // Tiny arguments: erf(x) = 2x/sqrt(pi) (1 - x^2/3 + ...), and the correction is below 1e-16.
  const tiny = 1e-8, lin = (2 / Math.sqrt(Math.PI)) * tiny;
  assert.ok(Math.abs(erf(tiny) - lin) <= 4e-16 * lin, `erf(1e-8) = ${erf(tiny)}`);
  assert.equal(erf(Infinity), 1);
  assert.equal(erf(-Infinity), -1);
  assert.equal(erf(40), 1);
  assert.ok(Number.isNaN(erf(NaN)));
  assert.equal(erf(0), 0);
});

Deno.test("erf: odd symmetry and monotone across the series/continued-fraction switch", () => {
  const r = rng(17);
  for (let i = 0; i < 200; i++) {
    const x = r.range(0, 7);
    assert.equal(erf(-x), -erf(x), `erf(-${x})`);
  }
  let prev = erf(2.4999);
  for (let x = 2.4999; x <= 2.5001; x += 1e-6) {
    const v = erf(x);
    assert.ok(v >= prev, `erf is monotone at ${x}`);
    prev = v;
  }
  // Either side of the switch at 2.5, against 40-digit values.
  assert.ok(Math.abs(erf(2.4999) - 0.99959283009966654908) <= 4e-16);
  assert.ok(Math.abs(erf(2.5001) - 0.99959326575652931980) <= 4e-16);
});

Deno.test({
  name: "erf: erf(-0) is -0",
  fn: () => {
    assert.ok(Object.is(erf(-0), -0));
  },
});

Deno.test("interpreter: the erf op uses the same values", () => {
  const r = rng(18);
  const xv = Float64Array.from({ length: 30 }, () => r.range(-4, 4));
  const g = new Graph("erf");
  const got = run(g, g.add("erf", [inp(g, "x", "f32", [30])]), { x: xv });
  assert.deepEqual([...got], [...xv].map(erf));
  const h = new Graph("erf_known");
  const known = h.add("erf", [inp(h, "x", "f32", [ERF_VALUES.length])]);
  const kv = run(h, known, { x: ERF_VALUES.map(([x]) => x) });
  ERF_VALUES.forEach(([x, want], i) => assert.ok(Math.abs(kv[i] - want) <= 4e-16 * want, `erf op at ${x}`));
});

// ---- evaluate's errors --------------------------------------------------------------------------------

Deno.test("interpreter: evaluate names a missing or wrongly sized feed", () => {
  const g = new Graph("feeds");
  const x = inp(g, "tokens", "i32", [2, 3]);
  const w = g.add("param", [], { name: "w", init: "zeros" }, T("f32", [2, 3]));
  g.setOutput("y", g.add("mul", [g.add("cast", [x], { to: "f32" }), w]));
  const six = [1, 2, 3, 4, 5, 6];
  const err = (feeds: Record<string, ArrayLike<number>>, re: RegExp) =>
    assert.throws(() => evaluate(g, feeds), (e: unknown) => {
      assert.ok(e instanceof IRError, String(e));
      assert.match(e.message, re);
      return true;
    });
  err({ w: six }, /no value fed for input 'tokens' \(i32\[2,3\]\)/);
  err({ tokens: six }, /no value fed for param 'w' \(f32\[2,3\]\)/);
  err({ tokens: [1, 2, 3, 4, 5], w: six }, /input 'tokens' expects 6 values \(i32\[2,3\]\), got 5/);
  err({ tokens: six, w: [...six, 7] }, /param 'w' expects 6 values \(f32\[2,3\]\), got 7/);
  assert.throws(() => evaluate(g, { tokens: six, w: six }, { outputs: ["z"] }), /has no output 'z'/);
  assert.deepEqual([...evaluate(g, { tokens: six, w: six }).get("y")!], six.map((v) => v * v));
});

Deno.test("interpreter: only what the requested outputs need is evaluated", () => {
  const g = new Graph("partial");
  const a = inp(g, "a", "f32", [2]);
  const b = inp(g, "b", "f32", [2]);
  g.setOutput("na", g.add("neg", [a]));
  g.setOutput("nb", g.add("neg", [b]));
  // b is not fed, and not needed for "na".
  const out = evaluate(g, { a: [1.5, -2] }, { outputs: ["na"] });
  assert.deepEqual([...out.keys()], ["na"]);
  assert.deepEqual([...out.get("na")!], [-1.5, 2]);
  assert.throws(() => evaluate(g, { a: [1.5, -2] }), /no value fed for input 'b'/);
});
