/**
 * Vectorization of loop kernels (compiler/lower/vectorize.ts): which kernels qualify and why others do
 * not, on hand-built and on really lowered kernels; the lane classification checked against a CPU
 * interpreter of the kernel IR on random index math of the kind the lowering builds (broadcasts,
 * permutes, reshapes, slices, pads, gathers); numerics of vectorized kernels on WebGPU (lavapipe in CI)
 * against the reference interpreter in f32 and f16; determinism.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { emitWGSL } from "../../compiler/codegen/wgsl.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import {
  add,
  bin,
  cast,
  div,
  f32,
  gid,
  i32,
  if_,
  type KBinding,
  type Kernel,
  type KExpr,
  type KStmt,
  let_,
  load,
  lt,
  mod,
  mul,
  ref,
  store,
} from "../../compiler/kernel_ir/ir.ts";
import {
  broadcastOperand,
  clamp,
  delinearize,
  type Idx,
  linearize,
  padOperand,
  permuteOperand,
  reshapeOperand,
  sliceOperand,
} from "../../compiler/lower/index_math.ts";
import { isVectorized, vectorize, vectorizeLoop, whyNotVectorized } from "../../compiler/lower/vectorize.ts";
import { crossEntropy, dropout, gelu, geluTanh, ModelBuilder, type Tensor } from "../../dsl/mod.ts";
import type { DType, Graph } from "../../ir/mod.ts";
import { uniformAt } from "../../numeric/philox.ts";
import { checkAgainstReference, F16_TOL, F32_TOL } from "../util/fused_check.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { type Rng, seededRandom } from "../../cases/random.ts";
import { testGpu } from "../util/webgpu.ts";
import { WEBGPU } from "../../engine/backends.ts";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";

// ---- hand-built kernels ------------------------------------------------------------------------------

const bind = (name: string, t: KBinding["t"], access: KBinding["access"], elements: number): KBinding => ({
  name,
  buffer: 0,
  t,
  access,
  elements,
});

/** A loop kernel as lowerLoop shapes it: `if (gid < n) { body }`. */
function loop(n: number, bindings: KBinding[], body: KStmt[]): Kernel {
  return {
    name: "k000_test",
    kind: "loop",
    bindings,
    shared: [],
    workgroupSize: 256,
    workgroups: Math.ceil(n / 256),
    body: [if_(lt(gid, i32(n)), body)],
    about: ["test kernel"],
    usesF16: false,
  };
}

const N = 1024;
const x = (e: KExpr = gid) => load("b_x", e, "f32");

test("a plain elementwise kernel: vec4 loads and stores, a quarter of the threads", () => {
  const k = loop(N, [bind("b_x", "f32", "read", N), bind("b_out", "f32", "write", N)], [
    let_("v0", x()),
    store("b_out", gid, mul(ref("v0", "f32"), f32(2))),
  ]);
  const r = vectorize(k);
  assert.equal(r.reason, undefined);
  const v = r.kernel;
  assert.deepEqual(v.bindings.map((b) => b.vector), [4, 4]);
  assert.equal(v.workgroups, 1);
  assert.match(v.about.at(-1)!, /vectorized: 4 consecutive elements per thread; vec4 bindings 0, 1/);
  const code = emitWGSL(v).code;
  assert.match(code, /var<storage, read> b_x: array<vec4<f32>>;/);
  assert.match(
    code,
    /if \(gid < 256\) \{\n\s+let v0: vec4<f32> = b_x\[gid\];\n\s+b_out\[gid\] = v0 \* 2\.0;/,
  );
  // Scalar kernels are left alone, and vectorizing twice changes nothing.
  assert.equal(vectorizeLoop(v), v);
  assert.equal(whyNotVectorized(v), "already vectorized");
  assert.ok(isVectorized(v) && !isVectorized(k));
});

test("a bias over the last axis (gid % H, 4 | H) is a vec4 load; a row scalar (gid / H) one scalar load", () => {
  const H = 64;
  const k = loop(N, [
    bind("b_x", "f32", "read", N),
    bind("b_bias", "f32", "read", H),
    bind("b_row", "f32", "read", N / H),
    bind("b_out", "f32", "write", N),
  ], [
    let_("v0", add(x(), load("b_bias", mod(gid, i32(H)), "f32"))),
    store("b_out", gid, mul(ref("v0", "f32"), load("b_row", div(gid, i32(H)), "f32"))),
  ]);
  const v = vectorizeLoop(k);
  assert.deepEqual(v.bindings.map((b) => b.vector), [4, 4, undefined, 4]);
  const code = emitWGSL(v).code;
  assert.match(code, /let v0: vec4<f32> = b_x\[gid\] \+ b_bias\[gid % 16\];/);
  assert.match(code, /b_out\[gid\] = v0 \* b_row\[gid \/ 16\];/);
});

test("row base plus column (a gather of rows, a permute of whole rows) stays contiguous", () => {
  // table[clamp(ids[gid / 64]) * 64 + gid % 64]: the embedding lookup.
  const row = clamp(cast(load("b_ids", div(gid, i32(64)), "i32"), "i32"), 0, 99);
  const k = loop(N, [
    bind("b_ids", "i32", "read", N / 64),
    bind("b_table", "f32", "read", 6400),
    bind("b_out", "f32", "write", N),
  ], [store("b_out", gid, load("b_table", add(mul(row, i32(64)), mod(gid, i32(64))), "f32"))]);
  const v = vectorizeLoop(k);
  assert.deepEqual(v.bindings.map((b) => b.vector), [undefined, 4, 4]);
  assert.match(
    emitWGSL(v).code,
    /b_out\[gid\] = b_table\[min\(max\(b_ids\[gid \/ 16\], 0\), 99\) \* 16 \+ gid % 16\];/,
  );
});

test("indices that are not four consecutive elements are gathered lane by lane", () => {
  const H = 6; // 4 does not divide the row: gid % 6 and gid / 6 vary across a thread's lanes
  const body = [store("b_out", gid, add(x(), load("b_bias", mod(gid, i32(H)), "f32")))];
  const odd = loop(N + 2, [
    bind("b_x", "f32", "read", N + 2),
    bind("b_bias", "f32", "read", H),
    bind("b_out", "f32", "write", N + 2),
  ], body);
  assert.match(whyNotVectorized(odd)!, /1026 elements, not a multiple of 4/);
  const k = loop(N, [
    bind("b_x", "f32", "read", N + 2),
    bind("b_bias", "f32", "read", H),
    bind("b_out", "f32", "write", N),
  ], body);
  const v = vectorizeLoop(k);
  assert.deepEqual(v.bindings.map((b) => b.vector), [undefined, undefined, 4]);
  const code = emitWGSL(v).code;
  // b_x has 1026 elements: not a whole number of vec4s, so it is read lane by lane.
  assert.match(code, /let ix0: i32 = gid \* 4;/);
  assert.match(code, /vec4<f32>\(b_x\[ix0\], b_x\[ix0 \+ 1\], b_x\[ix0 \+ 2\], b_x\[ix0 \+ 3\]\)/);
  assert.match(code, /let ix1: vec4<i32> = gid \* 4 \+ vec4<i32>\(0, 1, 2, 3\);/);
  assert.match(code, /let ix2: vec4<i32> = ix1 % 6;/);
  assert.match(code, /vec4<f32>\(b_bias\[ix2\.x\], b_bias\[ix2\.y\], b_bias\[ix2\.z\], b_bias\[ix2\.w\]\)/);
});

test("a binding read both contiguously and at one element stays scalar", () => {
  const k = loop(N, [bind("b_x", "f32", "read", N), bind("b_out", "f32", "write", N)], [
    store("b_out", gid, add(x(), x(i32(0)))),
  ]);
  const v = vectorizeLoop(k);
  assert.deepEqual(v.bindings.map((b) => b.vector), [undefined, 4]);
  assert.match(emitWGSL(v).code, /b_out\[gid\] = vec4<f32>\(b_x\[ix0\], b_x\[ix0 \+ 1\], .*\) \+ b_x\[0\];/);
});

test("refusals carry reasons", () => {
  const io = [bind("b_x", "f32", "read", N), bind("b_out", "f32", "write", N)];
  const copy = [store("b_out", gid, x())];
  assert.match(whyNotVectorized({ ...loop(N, io, copy), kind: "reduce" })!, /a reduce kernel/);
  assert.match(whyNotVectorized({ ...loop(N, io, copy), body: copy })!, /not `if \(gid < N\)/);
  assert.match(
    whyNotVectorized(loop(N / 2, io, [store("b_out", mul(gid, i32(2)), x())]))!,
    /the store to b_out is not at four consecutive elements/,
  );
  assert.match(
    whyNotVectorized(loop(N, io, [let_("a", f32(0), true), store("b_out", gid, x())]))!,
    /mutable local a/,
  );
  assert.match(
    whyNotVectorized(loop(N, [bind("b_x", "bf16", "read", N), io[1]], [store("b_out", gid, f32(1))]))!,
    /bf16/,
  );
  // Every binding scalar: nothing to gain.
  const mixed = loop(N, [bind("b_out", "f32", "read_write", N)], [
    store("b_out", gid, load("b_out", i32(0), "f32")),
  ]);
  assert.match(whyNotVectorized(mixed)!, /nothing to gain/);
  // A refused kernel comes back as the same object.
  assert.equal(vectorizeLoop(mixed), mixed);
});

test("dropout's Philox draw at four consecutive elements is one block; bool outputs are vec4<u32>", () => {
  const philox: KExpr = {
    k: "philox",
    t: "f32",
    seed: load("b_key", i32(0), "u32"),
    step: load("b_key", i32(1), "u32"),
    stream: 3,
    index: cast(gid, "u32"),
  };
  const k = loop(N, [
    bind("b_key", "u32", "read", 2),
    bind("b_x", "f32", "read", N),
    bind("b_keep", "bool", "write", N),
    bind("b_out", "f32", "write", N),
  ], [
    let_("keep", bin("ge", philox, f32(0.25))),
    store("b_keep", gid, ref("keep", "bool")),
    store("b_out", gid, { k: "select", t: "f32", cond: ref("keep", "bool"), a: x(), b: f32(0) }),
  ]);
  const v = vectorizeLoop(k);
  const code = emitWGSL(v).code;
  assert.match(
    code,
    /let keep: vec4<bool> = bf_philox4\(b_key\[0\], b_key\[1\], 3u, u32\(gid\) \* 4u\) >= vec4<f32>\(0\.25\);/,
  );
  assert.match(code, /var<storage, read_write> b_keep: array<vec4<u32>>;/);
  assert.match(code, /b_keep\[gid\] = select\(vec4<u32>\(0u\), vec4<u32>\(1u\), keep\);/);
  assert.match(code, /b_out\[gid\] = select\(vec4<f32>\(0\.0\), b_x\[gid\], keep\);/);
  assert.doesNotMatch(code, /fn bf_philox\(/);
});

// ---- the lane classification against an interpreter, on random index math ---------------------------

type Val = number | boolean | (number | boolean)[];

/** Runs every thread of `k` over `bufs` (plain JS numbers; integer ops wrap like i32/u32). */
function interpret(k: Kernel, bufs: Record<string, number[]>): void {
  const vectors = new Map(k.bindings.map((b) => [b.name, b.vector ?? 0]));
  const at = (buf: string, i: number): number => {
    const b = bufs[buf];
    if (!(Number.isInteger(i) && i >= 0 && i < b.length)) throw new Error(`${buf}[${i}] out of bounds`);
    return b[i];
  };
  const lanes = (f: (...xs: (number | boolean)[]) => number | boolean, ...args: Val[]): Val => {
    const n = args.find(Array.isArray)?.length;
    if (n === undefined) return f(...(args as (number | boolean)[]));
    return Array.from({ length: n }, (_, i) => f(...args.map((a) => (Array.isArray(a) ? a[i] : a))));
  };
  const intOf = (t: string, v: number) => (t.endsWith("u32") ? v >>> 0 : t.endsWith("i32") ? v | 0 : v);
  for (let thread = 0; thread < k.workgroups * k.workgroupSize; thread++) {
    const env = new Map<string, Val>();
    const ev = (e: KExpr): Val => {
      switch (e.k) {
        case "lit":
          return e.t === "bool" ? e.v !== 0 : e.v;
        case "ref":
          return env.get(e.name)!;
        case "id":
          return thread;
        case "load": {
          const i = ev(e.index) as number;
          const w = vectors.get(e.buf)!;
          return w ? Array.from({ length: w }, (_, c) => at(e.buf, i * w + c)) : at(e.buf, i);
        }
        case "un":
          return lanes(
            (a) => (e.op === "neg" ? -(a as number) : e.op === "not" ? !a : Math.exp(a as number)),
            ev(e.a),
          );
        case "bin": {
          const t = e.a.t;
          const int = /i32|u32/.test(t);
          const f = (a: number, b: number): number | boolean => {
            switch (e.op) {
              case "add":
                return intOf(t, a + b);
              case "sub":
                return intOf(t, a - b);
              case "mul":
                return int ? intOf(t, Math.imul(a, b)) : a * b;
              case "div":
                return int ? intOf(t, Math.trunc(a / b)) : a / b;
              case "mod":
                return intOf(t, a % b);
              case "max":
                return Math.max(a, b);
              case "min":
                return Math.min(a, b);
              case "eq":
                return a === b;
              case "ne":
                return a !== b;
              case "lt":
                return a < b;
              case "le":
                return a <= b;
              case "gt":
                return a > b;
              case "ge":
                return a >= b;
              case "and":
                return Boolean(a) && Boolean(b);
              case "or":
                return Boolean(a) || Boolean(b);
            }
          };
          return lanes((a, b) => f(a as number, b as number), ev(e.a), ev(e.b));
        }
        case "select":
          return lanes((c, a, b) => (c ? a : b), ev(e.cond), ev(e.a), ev(e.b));
        case "cast": {
          const to = e.t.replace(/^v4/, "");
          const conv = (a: number | boolean): number | boolean => {
            if (to === "bool") return a !== 0 && a !== false;
            const n = Number(a);
            return to === "f32" || to === "f16" ? n : intOf(to, Math.trunc(n));
          };
          return lanes(conv, ev(e.a));
        }
        case "splat":
          return Array(4).fill(ev(e.a));
        case "vec":
          return e.parts.map((p) => ev(p) as number);
        case "lane":
          return (ev(e.a) as number[])[e.lane];
        case "philox": {
          const [seed, step, index] = [ev(e.seed), ev(e.step), ev(e.index)] as number[];
          const u = (i: number) => uniformAt(seed, step, e.stream, i);
          return e.t === "v4f32" ? [0, 1, 2, 3].map((c) => u(index + c)) : u(index);
        }
        case "sload":
          throw new Error("no workgroup memory here");
      }
    };
    const run = (body: readonly KStmt[]): void => {
      for (const s of body) {
        if (s.k === "let") env.set(s.name, ev(s.init));
        else if (s.k === "if") {
          if (ev(s.cond)) run(s.then);
        } else if (s.k === "store") {
          const i = ev(s.index) as number;
          const v = ev(s.value);
          const w = vectors.get(s.buf)!;
          if (w) (v as number[]).forEach((x, c) => (bufs[s.buf][i * w + c] = Number(x)));
          else bufs[s.buf][i] = Number(v);
        } else if (s.k !== "comment") throw new Error(`statement ${s.k} not interpreted`);
      }
    };
    run(k.body);
  }
}

const SHAPES = [[720], [6, 120], [12, 60], [6, 10, 12], [3, 4, 60], [5, 36, 4], [9, 80], [45, 16], [
  2,
  3,
  5,
  24,
], [
  10,
  72,
]];

const pick = <T>(r: Rng, xs: readonly T[]): T => xs[r.int(0, xs.length)];

/** A random chain of the lowering's movement index maps from the kernel's element index to a source. */
function randomSource(r: Rng): { idx: Idx; shape: number[] } {
  let shape = pick(r, SHAPES);
  let idx = delinearize(gid, shape);
  for (let step = r.int(0, 4); step > 0; step--) {
    const what = r.int(0, 5);
    if (what === 0) {
      // permute: the source's axes in another order
      const perm = shape.map((_, i) => i).sort(() => r.uniform() - 0.5);
      const src = shape.map((_, d) => shape[perm.indexOf(d)]);
      idx = permuteOperand(idx, perm);
      shape = src;
    } else if (what === 1) {
      // broadcast: some axes of size 1 in the source
      const src = shape.map((n) => (r.uniform() < 0.4 ? 1 : n));
      idx = broadcastOperand(idx, src, shape);
      shape = src;
    } else if (what === 2) {
      // reshape to another factorization of the same count
      const n = shape.reduce((a, b) => a * b, 1);
      const other = SHAPES.find((s) => s.reduce((a, b) => a * b, 1) === n && r.uniform() < 0.5);
      if (other) {
        idx = reshapeOperand(idx, other, shape);
        shape = other;
      }
    } else if (what === 3) {
      // slice of a larger source
      const start = shape.map(() => r.int(0, 3));
      const src = shape.map((n, d) => n + start[d] + r.int(0, 2));
      idx = sliceOperand(idx, start);
      shape = src;
    } else {
      // pad of a smaller source: clamped reads (the select is left out)
      const low = shape.map((n) => (n > 4 ? r.int(0, 3) : 0));
      const src = shape.map((n, d) => (n > 4 ? n - low[d] - r.int(0, 2) : n));
      idx = padOperand(idx, low, src, shape).idx;
      shape = src;
    }
  }
  return { idx, shape };
}

test("random index math: the vectorized kernel computes what the scalar kernel does", () => {
  const r = seededRandom(7);
  const kinds = { vec4: 0, scalarLoad: 0, gather: 0, refused: 0 };
  for (let trial = 0; trial < 300; trial++) {
    const n = 720;
    const a = randomSource(r), b = randomSource(r);
    const size = (s: number[]) => s.reduce((p, q) => p * q, 1);
    const k = loop(n, [
      bind("b_a", "f32", "read", size(a.shape)),
      bind("b_b", "i32", "read", size(b.shape)),
      bind("b_out", "f32", "write", n),
      bind("b_flag", "bool", "write", n),
    ], [
      let_("va", load("b_a", linearize(a.idx, a.shape), "f32")),
      let_("vb", load("b_b", linearize(b.idx, b.shape), "i32")),
      // iota-like integer math on the element index, and a comparison
      let_("iota", mod(div(gid, i32(pick(r, [1, 2, 4, 6, 8, 12]))), i32(pick(r, [3, 4, 10, 60])))),
      let_("hit", bin("eq", ref("iota", "i32"), ref("vb", "i32"))),
      store(
        "b_out",
        gid,
        add(mul(ref("va", "f32"), cast(ref("iota", "i32"), "f32")), cast(ref("vb", "i32"), "f32")),
      ),
      store("b_flag", gid, ref("hit", "bool")),
    ]);
    const v = vectorize(k);
    if (v.reason) {
      kinds.refused++;
      continue;
    }
    const code = emitWGSL(v.kernel).code;
    if (/b_a: array<vec4/.test(code)) kinds.vec4++;
    else if (/let va: f32/.test(code)) kinds.scalarLoad++;
    else kinds.gather++;
    const inputs = {
      b_a: Array.from({ length: size(a.shape) }, (_, i) => i * 0.5 + 1),
      b_b: Array.from({ length: size(b.shape) }, (_, i) => (i * 7) % 11),
    };
    const run = (kk: Kernel) => {
      const bufs = { ...structuredClone(inputs), b_out: Array(n).fill(NaN), b_flag: Array(n).fill(NaN) };
      interpret(kk, bufs);
      return bufs;
    };
    const want = run(k), got = run(v.kernel);
    assert.deepEqual(got.b_out, want.b_out, `trial ${trial}:\n${code}`);
    assert.deepEqual(got.b_flag, want.b_flag, `trial ${trial}:\n${code}`);
  }
  // The sample covers every case of the classification.
  assert.equal(kinds.refused, 0);
  for (const [kind, count] of Object.entries(kinds)) {
    if (kind !== "refused") assert.ok(count >= 10, `${kind}: ${count} of 300 (${JSON.stringify(kinds)})`);
  }
});

test("Philox: one block for four lanes, or one draw per lane, gives the scalar kernel's mask", () => {
  for (const index of [cast(gid, "u32"), cast(add(gid, i32(2)), "u32"), cast(div(gid, i32(8)), "u32")]) {
    const k = loop(64, [bind("b_key", "u32", "read", 2), bind("b_out", "f32", "write", 64)], [
      store("b_out", gid, {
        k: "philox",
        t: "f32",
        seed: load("b_key", i32(0), "u32"),
        step: load("b_key", i32(1), "u32"),
        stream: 9,
        index,
      }),
    ]);
    const v = vectorizeLoop(k);
    assert.ok(isVectorized(v));
    const bufs = () => ({ b_key: [12345, 6], b_out: Array(64).fill(NaN) });
    const want = bufs(), got = bufs();
    interpret(k, want);
    interpret(v, got);
    assert.deepEqual(got.b_out, want.b_out, emitWGSL(v).code);
  }
});

// ---- really lowered kernels -------------------------------------------------------------------------

function graph(name: string, dt: DType, body: (m: ModelBuilder, dt: DType) => Tensor): Graph {
  const m = new ModelBuilder(name);
  m.output("out", body(m, dt));
  return m.graph;
}

const loopKernels = (g: Graph) =>
  compileGraph(g, { fuse: true, target: target("wgsl") }).kernels.filter((k) => k.kind === "loop");

const [B, S, H] = [2, 6, 32];

/** Small graphs whose loop kernels exercise each case, and how many of their loop kernels vectorize. */
const CASES: {
  name: string;
  body: (m: ModelBuilder, dt: DType) => Tensor;
  vectorized: number;
  loops: number;
}[] = [
  {
    name: "bias over rows + GELU (erf) and tanh-GELU",
    body: (m, dt) => {
      const x = m.input("x", dt, [B, S, H]);
      return gelu(x.add(m.param("bias", [H], "zeros", dt))).mul(geluTanh(x));
    },
    vectorized: 1,
    loops: 1,
  },
  {
    name: "row scalar broadcast along the row (uniform across lanes)",
    body: (m, dt) => m.input("x", dt, [B, S, H]).mul(m.input("row", dt, [B, S, 1]).exp()).sub(1),
    vectorized: 1,
    loops: 1,
  },
  {
    name: "dropout (one Philox block per thread)",
    body: (m, dt) => dropout(m.input("x", dt, [B, S, H]), 0.25, m.input("rng_key", "u32", [2])),
    vectorized: 1,
    loops: 1,
  },
  {
    name: "rows of 30 (bias and row scalar gathered lane by lane)",
    body: (m, dt) =>
      m.input("x", dt, [B, 2, 30]).add(m.param("bias", [30], "zeros", dt)).mul(m.input("row", dt, [B, 2, 1])),
    vectorized: 1,
    loops: 1,
  },
  {
    name: "transpose + one-hot of an iota (integer vector math)",
    body: (m, dt) => {
      const x = m.input("x", dt, [S, H]).permute([1, 0]);
      const onehot = m.iota([H, S], 1).eq(m.input("label", "i32", [H, 1]).broadcastTo([H, S]));
      return m.where(onehot, x, x.neg());
    },
    vectorized: 1,
    loops: 1,
  },
  {
    name: "3·5·7 elements (must stay scalar)",
    body: (m, dt) => m.input("x", dt, [3, 5, 7]).mul(m.param("w", [7], "zeros", dt)).exp(),
    vectorized: 0,
    loops: 1,
  },
];

for (const c of CASES) {
  Deno.test(`lowered loop kernels: ${c.name} — ${c.vectorized} of ${c.loops} vectorized`, () => {
    for (const dt of ["f32", "f16"] as const) {
      const loops = loopKernels(graph(c.name, dt, c.body));
      assert.equal(loops.length, c.loops, dt);
      const vectorized = loops.filter(isVectorized);
      assert.equal(vectorized.length, c.vectorized, `${dt}: ${loops.map((k) => whyNotVectorized(k))}`);
      for (const k of loops.filter((k) => !isVectorized(k))) assert.ok(whyNotVectorized(k), k.name);
      for (const k of vectorized) {
        assert.equal(whyNotVectorized(k), "already vectorized");
        const code = emitWGSL(k).code;
        assert.match(code, /array<vec4<f(32|16)>>/);
        if (dt === "f16") assert.match(code, /^enable f16;$/m);
      }
    }
  });
}

test("lowered: the bias is read as vec4 at gid % (H/4) and the row scalar once per thread", () => {
  const bias = loopKernels(graph("bias", "f32", CASES[0].body))[0];
  assert.match(emitWGSL(bias).code, /b\d\[gid % 8\]/);
  assert.match(emitWGSL(bias).code, /bf_erf4\(/);
  assert.match(emitWGSL(bias).code, /bf_tanh4\(/);
  const row = loopKernels(graph("row", "f32", CASES[1].body))[0];
  // The row index [b, s] of element [b, s, h] with H = 32: one scalar load and one exp per thread.
  assert.match(
    emitWGSL(row).code,
    /let (v\d+): f32 = b\d\[gid \/ 48 \* 6 \+ gid \/ 8 % 6\];\n\s+let v\d+: f32 = exp\(\1\);/,
  );
  const three = loopKernels(graph("odd", "f32", CASES[5].body))[0];
  assert.match(whyNotVectorized(three)!, /105 elements, not a multiple of 4/);
});

// ---- on the device ----------------------------------------------------------------------------------

const gpu = await testGpu();

CASES.forEach((c, i) => {
  for (const dt of ["f32", "f16"] as const) {
    Deno.test({
      name: `webgpu vectorized vs reference (${dt}): ${c.name}`,
      ignore: !gpu.ctx,
      fn: async () => {
        const g = graph(c.name, dt, c.body);
        const feeds = randomFeeds(g, 500 + i, { rng_key: (r) => r.u32(), label: (r) => r.int(0, S) });
        await checkAgainstReference(gpu.ctx!, g, feeds, {
          fuse: true,
          tol: dt === "f16" ? F16_TOL : F32_TOL,
        });
      },
    });
  }
});

Deno.test({
  name: "webgpu vectorized cross-entropy backward (iota one-hot over rows of 50, gathers) vs reference",
  ignore: !gpu.ctx,
  fn: async () => {
    const m = new ModelBuilder("ce");
    const logits = m.param("logits", [8, 50], "zeros", "f32");
    const ce = crossEntropy(logits, m.input("labels", "i32", [8]), -1);
    m.output("loss", ce.loss);
    const g = differentiate(m.graph, "loss");
    assert.ok(loopKernels(g).some(isVectorized));
    const feeds = randomFeeds(g, 77, { labels: (r, i) => (i === 3 ? -1 : r.int(0, 50)) });
    await checkAgainstReference(gpu.ctx!, g, feeds, { fuse: true, tol: F32_TOL });
  },
});

Deno.test({
  name: "vectorized kernels are deterministic: same source, bit-identical results run to run",
  ignore: !gpu.ctx,
  fn: async () => {
    const g = graph(
      "det",
      "f32",
      (m, dt) =>
        dropout(
          gelu(m.input("x", dt, [B, S, H]).add(m.param("bias", [H], "zeros", dt))),
          0.1,
          m.input("rng_key", "u32", [2]),
        ),
    );
    const feeds = randomFeeds(g, 9, { rng_key: (r) => r.u32() });
    const outs: Float32Array[] = [];
    const sources: string[] = [];
    for (let run = 0; run < 2; run++) {
      const { executor, compiled } = await WEBGPU.compile(gpu.ctx!, g, true);
      try {
        assert.ok(compiled.kernels.some(isVectorized));
        sources.push(compiled.plan.kernels.map((k) => k.source!.code).join("\n"));
        const out = await executor.run(feeds);
        outs.push(Float32Array.from(out.out));
        outs.push(Float32Array.from((await executor.run(feeds)).out));
      } finally {
        executor.destroy();
      }
    }
    assert.equal(sources[0], sources[1]);
    for (const o of outs.slice(1)) {
      assert.deepEqual(new Uint32Array(o.buffer), new Uint32Array(outs[0].buffer));
    }
  },
});

function test(name: string, fn: () => void) {
  Deno.test(name, fn);
}
