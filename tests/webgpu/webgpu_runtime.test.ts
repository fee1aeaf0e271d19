/**
 * Hand-built kernels in the kernel IR, emitted as WGSL and run by the WebGPU executor on a real device
 * (lavapipe in CI), checked against CPU computations on fresh random inputs.
 */
import assert from "node:assert/strict";
import {
  add,
  bin,
  cast,
  div,
  f32,
  for_,
  gid,
  i32,
  if_,
  type KBinding,
  type Kernel,
  type KExpr,
  type KStmt,
  let_,
  lid,
  load,
  lt,
  mod,
  mul,
  ref,
  select,
  set,
  store,
  sub,
  u32,
  un,
  wgId,
} from "../../compiler/kernel_ir/ir.ts";
import { erf } from "../../numeric/erf.ts";
import { fillUniform, uniformAt } from "../../numeric/philox.ts";
import { WebGPUExecutor } from "../../runtime/webgpu/webgpu_executor.ts";
import { WebGPUError } from "../../runtime/webgpu/webgpu_errors.ts";
import { formatProfile } from "../../runtime/profile.ts";
import type { Plan } from "../../plan/plan.ts";
import { seededRandom } from "../../cases/random.ts";
import { planOf, type TestBuffer, testGpu, vectors } from "../util/webgpu.ts";

const gpu = await testGpu();
const ignore = !gpu.ctx;

const bind = (
  name: string,
  buffer: number,
  t: KBinding["t"],
  access: KBinding["access"],
  elements: number,
) => ({
  ...{ name, buffer, t, access, elements },
});
/** Bindings b_<name> on buffers 0, 1, … from "name:dtype:access[:elements] …" (`n` elements unless given). */
const binds = (n: number, spec: string): KBinding[] =>
  spec.split(" ").map((s, buffer) => {
    const [name, t, access, elements] = s.split(":");
    return { name: `b_${name}`, buffer, t, access, elements: elements ? Number(elements) : n } as KBinding;
  });

/** One thread per element, guarded by gid < n. */
function loopKernel(
  name: string,
  n: number,
  bindings: KBinding[],
  body: (i: KExpr) => KStmt[],
  workgroupSize = 64,
): Kernel {
  return {
    name,
    kind: "loop",
    bindings,
    shared: [],
    workgroupSize,
    workgroups: Math.ceil(n / workgroupSize),
    body: [if_(lt(gid, i32(n)), body(gid))],
    about: [`test kernel ${name}`],
    usesF16: bindings.some((b) => b.t === "f16"),
  };
}

/** Creates an executor for `plan`, runs `f`, and always frees the GPU buffers. */
async function withExecutor<T>(plan: Plan, f: (ex: WebGPUExecutor) => Promise<T>): Promise<T> {
  const ex = await WebGPUExecutor.create(gpu.ctx!, plan);
  try {
    return await f(ex);
  } finally {
    ex.destroy();
  }
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): { diff: number; at: number } {
  let diff = 0, at = -1;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (d > diff || Number.isNaN(d)) [diff, at] = [Number.isNaN(d) ? Infinity : d, i];
  }
  return { diff, at };
}

Deno.test({
  name: "webgpu: elementwise f32 kernel matches the CPU",
  ignore,
  fn: async () => {
    const n = 3001;
    const r = seededRandom(11);
    const x = Float32Array.from({ length: n }, () => r.normal());
    const y = Float32Array.from({ length: n }, () => r.range(-3, 3));
    const k = loopKernel("k_elementwise", n, binds(n, "x:f32:read y:f32:read out:f32:write"), (i) => {
      const xv = ref("x", "f32"), yv = ref("y", "f32");
      return [
        let_("x", load("b_x", i, "f32")),
        let_("y", load("b_y", i, "f32")),
        // x*y + exp(-|x|) - sqrt(|y|) / (1 + x^2)
        store(
          "b_out",
          i,
          sub(
            add(mul(xv, yv), un("exp", un("neg", un("abs", xv)))),
            div(un("sqrt", un("abs", yv)), add(f32(1), mul(xv, xv))),
          ),
        ),
      ];
    });
    const plan = planOf([k], vectors(n, "x:f32 y:f32 out:f32"));
    const { out } = await withExecutor(plan, (ex) => ex.run({ x, y }));
    const want = Array.from(
      x,
      (xi, i) => xi * y[i] + Math.exp(-Math.abs(xi)) - Math.sqrt(Math.abs(y[i])) / (1 + xi * xi),
    );
    const { diff, at } = maxAbsDiff(out, want);
    assert.ok(diff < 1e-5, `max |gpu - cpu| = ${diff} at ${at}`);
  },
});

Deno.test({
  name: "webgpu: f16 storage with f32 arithmetic rounds like the CPU",
  ignore,
  fn: async () => {
    const n = 2051; // odd: 4102 bytes, so bindings, writes and reads are padded to 4104
    const r = seededRandom(12);
    const x = Float32Array.from({ length: n }, () => Math.f16round(r.normal() * 4));
    const k = loopKernel(
      "k_f16",
      n,
      [bind("b_x", 0, "f16", "read", n), bind("b_out", 1, "f16", "write", n)],
      (i) => {
        const v = ref("v", "f32");
        return [
          let_("v", cast(load("b_x", i, "f16"), "f32")),
          store("b_out", i, cast(add(mul(v, f32(1.5)), mul(f32(0.25), mul(v, v))), "f16")),
        ];
      },
    );
    const plan = planOf([k], vectors(n, "x:f16 out:f16"));
    assert.match(plan.kernels[0].source!.code, /enable f16;/);
    const { out } = await withExecutor(plan, (ex) => ex.run({ x }));
    assert.ok(out instanceof Float32Array);
    for (let i = 0; i < n; i++) {
      const fr = Math.fround;
      const want = Math.f16round(fr(fr(x[i] * 1.5) + fr(0.25 * fr(x[i] * x[i]))));
      // A fused multiply-add may round the f32 intermediate differently: allow one f16 ulp.
      const ulp = 2 ** (Math.floor(Math.log2(Math.max(Math.abs(want), 2 ** -14))) - 10);
      assert.ok(Math.abs(out[i] - want) <= ulp, `at ${i}: ${out[i]} vs ${want}`);
    }
  },
});

Deno.test({
  name: "webgpu: integer division and remainder truncate like C (index math)",
  ignore,
  fn: async () => {
    const n = 4096;
    const r = seededRandom(13);
    const a = Int32Array.from({ length: n }, () => r.int(-100000, 100000));
    const b = Int32Array.from({ length: n }, () => {
      const v = r.int(1, 40);
      return r.uniform() < 0.5 ? -v : v;
    });
    const k = loopKernel(
      "k_intdiv",
      n,
      binds(n, "a:i32:read b:i32:read q:i32:write r:i32:write idx:i32:write"),
      (i) => {
        const av = ref("a", "i32"), bv = ref("b", "i32");
        return [
          let_("a", load("b_a", i, "i32")),
          let_("b", load("b_b", i, "i32")),
          store("b_q", i, div(av, bv)),
          store("b_r", i, mod(av, bv)),
          // A typical delinearization: (i / 7) % 5 * 100 + i % 7
          store("b_idx", i, add(mul(mod(div(i, i32(7)), i32(5)), i32(100)), mod(i, i32(7)))),
        ];
      },
    );
    const plan = planOf([k], vectors(n, "a:i32 b:i32 q:i32 r:i32 idx:i32"));
    const out = await withExecutor(plan, (ex) => ex.run({ a, b }));
    assert.ok(out.q instanceof Int32Array);
    for (let i = 0; i < n; i++) {
      assert.equal(out.q[i], Math.trunc(a[i] / b[i]) | 0, `q at ${i}: ${a[i]} / ${b[i]}`);
      assert.equal(out.r[i], (a[i] % b[i]) | 0, `r at ${i}: ${a[i]} % ${b[i]}`);
      assert.equal(out.idx[i], (Math.floor(i / 7) % 5) * 100 + (i % 7));
    }
  },
});

Deno.test({
  name: "webgpu: select and casts between f32, f16, i32, u32 and bool",
  ignore,
  fn: async () => {
    const n = 1500;
    const r = seededRandom(14);
    // Every eighth value exactly 0, so float -> bool sees both outcomes.
    const x = Float32Array.from({ length: n }, (_, i) => (i % 8 === 3 ? 0 : r.normal() * 20));
    const m = Uint32Array.from({ length: n }, () => (r.uniform() < 0.5 ? 1 : 0));
    const spec =
      "x:f32:read m:bool:read sel:f32:write int:i32:write nz:bool:write mix:f32:write uns:u32:write";
    const k = loopKernel("k_casts", n, binds(n, `${spec} half:f16:write`), (i) => {
      const xv = ref("x", "f32"), mv = ref("m", "bool");
      return [
        let_("x", load("b_x", i, "f32")),
        let_("m", load("b_m", i, "bool")),
        store("b_sel", i, select(mv, xv, un("neg", xv))),
        store("b_int", i, cast(xv, "i32")),
        store("b_nz", i, cast(xv, "bool")),
        store("b_mix", i, add(cast(mv, "f32"), cast(cast(un("abs", xv), "u32"), "f32"))),
        store("b_uns", i, add(cast(cast(mv, "i32"), "u32"), cast(bin("gt", xv, f32(0)), "u32"))),
        store("b_half", i, cast(xv, "f16")),
      ];
    });
    const plan = planOf([k], vectors(n, "x:f32 m:bool sel:f32 int:i32 nz:bool mix:f32 uns:u32 half:f16"));
    const code = plan.kernels[0].source!.code;
    assert.match(code, /var<storage, read> b_m: array<u32>;/, "bool storage is legalized to u32");
    const out = await withExecutor(plan, (ex) => ex.run({ x, m }));
    assert.ok(out.nz instanceof Uint32Array && out.uns instanceof Uint32Array);
    for (let i = 0; i < n; i++) {
      assert.equal(out.sel[i], m[i] ? x[i] : -x[i]);
      assert.equal(out.int[i], Math.trunc(x[i]) | 0);
      assert.equal(out.nz[i], x[i] !== 0 ? 1 : 0);
      assert.equal(out.mix[i], m[i] + Math.trunc(Math.abs(x[i])));
      assert.equal(out.uns[i], m[i] + (x[i] > 0 ? 1 : 0));
      assert.equal(out.half[i], Math.f16round(x[i]));
    }
  },
});

Deno.test({
  name: "webgpu: erf within 2e-7 of the reference (f32), f16 erf, and tanh finite for large |x|",
  ignore,
  fn: async () => {
    const r = seededRandom(15);
    const special = [0, -0, 0.5, -0.5, 0.999, 1, -1, 1.0001, 2.5, 3.99, 4, 4.5, -6, 10, -30];
    const x = Float32Array.from([...special, ...Array.from({ length: 6000 }, () => r.range(-6, 6))]);
    const n = x.length;
    const k = loopKernel(
      "k_erf",
      n,
      binds(n, "x:f32:read erf:f32:write tanh:f32:write erf16:f16:write"),
      (i) => [
        let_("x", load("b_x", i, "f32")),
        store("b_erf", i, un("erf", ref("x", "f32"))),
        store("b_tanh", i, un("tanh", mul(ref("x", "f32"), f32(20)))),
        store("b_erf16", i, un("erf", cast(ref("x", "f32"), "f16"))),
      ],
    );
    const plan = planOf([k], vectors(n, "x:f32 erf:f32 tanh:f32 erf16:f16"));
    const out = await withExecutor(plan, (ex) => ex.run({ x }));
    const { diff, at } = maxAbsDiff(out.erf, Array.from(x, erf));
    assert.ok(diff <= 2e-7, `max |erf error| = ${diff} at x = ${x[at]}`);
    for (let i = 0; i < n; i++) {
      const want = Math.tanh(Math.fround(x[i] * 20));
      assert.ok(Math.abs(out.tanh[i] - want) < 1e-6, `tanh(${x[i] * 20}) = ${out.tanh[i]}`);
      // f16 erf: computed in f32 on the f16-rounded argument, rounded to f16 once.
      const want16 = erf(Math.f16round(x[i]));
      assert.ok(Math.abs(out.erf16[i] - want16) <= 2 ** -11, `erf16(${x[i]}) = ${out.erf16[i]} vs ${want16}`);
    }
  },
});

Deno.test({
  name: "webgpu: philox matches numeric/philox.ts bit for bit",
  ignore,
  fn: async () => {
    const n = 4099; // not a multiple of 4: the last Philox block is partial
    const sites: [number, number, number][] = [[0, 0, 0], [0xdeadbeef, 7, 3], [
      12345,
      0xffffffff,
      0x80000001,
    ]];
    for (const [seed, step, stream] of sites) {
      // seed and step come from a u32[2] key buffer, as dropout's random_uniform reads them.
      const k = loopKernel("k_philox", n, binds(n, "key:u32:read:2 u:f32:write hi:f32:write"), (i) => {
        const seedE = load("b_key", i32(0), "u32"), stepE = load("b_key", i32(1), "u32");
        return [
          store("b_u", i, { k: "philox", t: "f32", seed: seedE, step: stepE, stream, index: cast(i, "u32") }),
          // Indices past 2^31 (u32 arithmetic all the way).
          store("b_hi", i, {
            k: "philox",
            t: "f32",
            seed: seedE,
            step: stepE,
            stream,
            index: add(cast(i, "u32"), u32(3_000_000_001)),
          }),
        ];
      });
      const plan = planOf([k], [
        { name: "key", dtype: "u32", shape: [2] },
        { name: "u", dtype: "f32", shape: [n] },
        { name: "hi", dtype: "f32", shape: [n] },
      ]);
      const out = await withExecutor(plan, (ex) => ex.run({ key: [seed, step] }));
      const want = new Float32Array(n);
      fillUniform(want, seed, step, stream);
      for (let i = 0; i < n; i++) {
        assert.equal(out.u[i], want[i], `site (${seed}, ${step}, ${stream}) index ${i}`);
        assert.equal(out.hi[i], uniformAt(seed, step, stream, 3_000_000_001 + i), `high index ${i}`);
      }
    }
  },
});

/**
 * Row reduction as the lowering writes it: each thread folds a strided slice of the row, then wg_reduce
 * combines the threads; thread 0 stores. The sum and max are adjacent (one tree), and a second sum runs
 * inside a loop (a reduction whose shared array is reused across iterations).
 */
function rowReduceKernel(rows: number, len: number, w: number): Kernel {
  const x = (j: KExpr) => load("b_x", add(mul(ref("row", "i32"), i32(len)), j), "f32");
  const j = ref("j", "i32");
  return {
    name: `k_rowreduce_w${w}`,
    kind: "reduce",
    bindings: binds(rows, `x:f32:read:${rows * len} sum:f32:write max:f32:write sq:f32:write`),
    shared: [],
    workgroupSize: w,
    workgroups: rows,
    body: [
      let_("row", wgId),
      let_("acc", f32(0), true),
      let_("mx", f32(-Infinity), true),
      for_("j", lid, i32(len), i32(w), [
        set("acc", add(ref("acc", "f32"), x(j))),
        set("mx", bin("max", ref("mx", "f32"), x(j))),
      ]),
      { k: "wg_reduce", op: "sum", t: "f32", value: ref("acc", "f32"), out: "s" },
      { k: "wg_reduce", op: "max", t: "f32", value: ref("mx", "f32"), out: "m" },
      // Sum of squares of (x - mean), one pass per quarter of the row, reduced inside the loop.
      let_("mean", div(ref("s", "f32"), f32(len))),
      let_("sq", f32(0), true),
      for_("p", i32(0), i32(4), i32(1), [
        let_("part", f32(0), true),
        for_("j", add(lid, mul(ref("p", "i32"), i32(w))), i32(len), i32(4 * w), [
          let_("d", sub(x(j), ref("mean", "f32"))),
          set("part", add(ref("part", "f32"), mul(ref("d", "f32"), ref("d", "f32")))),
        ]),
        { k: "wg_reduce", op: "sum", t: "f32", value: ref("part", "f32"), out: "ps" },
        set("sq", add(ref("sq", "f32"), ref("ps", "f32"))),
      ]),
      if_(bin("eq", lid, i32(0)), [
        store("b_sum", ref("row", "i32"), ref("s", "f32")),
        store("b_max", ref("row", "i32"), ref("m", "f32")),
        store("b_sq", ref("row", "i32"), ref("sq", "f32")),
      ]),
    ],
    about: ["row sum, max and centered sum of squares"],
    usesF16: false,
  };
}

Deno.test({
  name: "webgpu: wg_reduce sum/max over rows matches the CPU and is bit-identical run to run",
  ignore,
  fn: async () => {
    const rows = 37, len = 1000;
    const r = seededRandom(16);
    const x = Float32Array.from({ length: rows * len }, () => r.normal() * 3 + 1);
    const buffers: TestBuffer[] = [
      { name: "x", dtype: "f32", shape: [rows, len] },
      { name: "sum", dtype: "f32", shape: [rows] },
      { name: "max", dtype: "f32", shape: [rows] },
      { name: "sq", dtype: "f32", shape: [rows] },
    ];
    for (const w of [256, 32, 1]) {
      const plan = planOf([rowReduceKernel(rows, len, w)], buffers);
      const [a, b] = await withExecutor(plan, async (ex) => [await ex.run({ x }), await ex.run({ x })]);
      for (let row = 0; row < rows; row++) {
        const vals = x.subarray(row * len, (row + 1) * len);
        let sum = 0, abs = 0, max = -Infinity;
        for (const v of vals) [sum, abs, max] = [sum + v, abs + Math.abs(v), Math.max(max, v)];
        const mean = Math.fround(a.sum[row] / len);
        let sq = 0;
        for (const v of vals) sq += (v - mean) ** 2;
        assert.ok(Math.abs(a.sum[row] - sum) <= 1e-5 * abs, `w=${w} row ${row}: sum ${a.sum[row]} vs ${sum}`);
        assert.equal(a.max[row], max, `w=${w} row ${row}: max`);
        assert.ok(Math.abs(a.sq[row] - sq) <= 1e-5 * sq, `w=${w} row ${row}: sq ${a.sq[row]} vs ${sq}`);
      }
      for (const name of ["sum", "max", "sq"]) {
        assert.deepEqual(a[name], b[name], `w=${w}: ${name} differs run to run`);
      }
    }
  },
});

Deno.test({
  name: "webgpu: a loop with a non-unit step",
  ignore,
  fn: async () => {
    const n = 777;
    const r = seededRandom(17);
    const x = Float32Array.from({ length: n }, () => r.range(0.5, 2));
    // out[i] = sum over t = 1, 4, 7, ... < i % 23 of t * x[i]
    const k = loopKernel(
      "k_loop",
      n,
      [bind("b_x", 0, "f32", "read", n), bind("b_out", 1, "f32", "write", n)],
      (i) => [
        let_("acc", f32(0), true),
        for_("t", i32(1), mod(i, i32(23)), i32(3), [
          set("acc", add(ref("acc", "f32"), mul(cast(ref("t", "i32"), "f32"), load("b_x", i, "f32")))),
        ]),
        store("b_out", i, ref("acc", "f32")),
      ],
    );
    const plan = planOf([k], vectors(n, "x:f32 out:f32"));
    const { out } = await withExecutor(plan, (ex) => ex.run({ x }));
    for (let i = 0; i < n; i++) {
      let want = 0;
      for (let t = 1; t < i % 23; t += 3) want += t * x[i];
      assert.ok(Math.abs(out[i] - want) <= 1e-6 * Math.abs(want), `at ${i}: ${out[i]} vs ${want}`);
    }
  },
});

Deno.test({
  name: "webgpu: more than 65,535 workgroups run as a 2-D grid, each element written exactly once",
  ignore,
  fn: async () => {
    const n = 70_001; // one thread per workgroup; not a multiple of the grid's rows, so some return early
    const k = loopKernel("k_big_grid", n, [bind("b_out", 0, "i32", "read_write", n)], (i) => [
      store("b_out", i, add(load("b_out", i, "i32"), add(i, i32(1)))),
    ], 1);
    const plan = planOf([k], [{ name: "out", dtype: "i32", shape: [n], role: "output" }]);
    const { grid } = plan.kernels[0].source!;
    assert.ok(grid[1] > 1 && grid[0] <= 65535 && grid[0] * grid[1] >= n, `grid ${grid}`);
    const r = seededRandom(18);
    const init = Int32Array.from({ length: n }, () => r.int(-1000, 1000));
    const out = await withExecutor(plan, async (ex) => {
      ex.write("out", init);
      await ex.step();
      return await ex.read("out");
    });
    for (let i = 0; i < n; i++) assert.equal(out[i], init[i] + i + 1, `element ${i}`);
  },
});

Deno.test({
  name: "webgpu: a row reduction over more than 65,535 rows (early return before barriers)",
  ignore,
  fn: async () => {
    const rows = 70_001, w = 4;
    const r = seededRandom(20);
    const x = Int32Array.from({ length: rows * w }, () => r.int(-50, 50));
    const k: Kernel = {
      name: "k_many_rows",
      kind: "reduce",
      bindings: [bind("b_x", 0, "i32", "read", rows * w), bind("b_sum", 1, "f32", "write", rows)],
      shared: [],
      workgroupSize: w,
      workgroups: rows,
      body: [
        { k: "wg_reduce", op: "sum", t: "f32", value: cast(load("b_x", gid, "i32"), "f32"), out: "s" },
        if_(bin("eq", lid, i32(0)), [store("b_sum", wgId, ref("s", "f32"))]),
      ],
      about: [],
      usesF16: false,
    };
    const plan = planOf([k], [{ name: "x", dtype: "i32", shape: [rows, w] }, {
      name: "sum",
      dtype: "f32",
      shape: [rows],
    }]);
    assert.match(plan.kernels[0].source!.code, /return;/);
    const { sum } = await withExecutor(plan, (ex) => ex.run({ x }));
    for (let row = 0; row < rows; row++) {
      assert.equal(sum[row], x[row * w] + x[row * w + 1] + x[row * w + 2] + x[row * w + 3], `row ${row}`);
    }
  },
});

Deno.test({
  name: "webgpu: a binding over maxStorageBufferBindingSize is refused, naming the tensor and the limit",
  ignore,
  fn: async () => {
    const limit = gpu.ctx!.limits.maxStorageBufferBindingSize;
    const n = limit / 4 + 16;
    const k = loopKernel("k_huge", n, [bind("b_big", 0, "f32", "read_write", n)], (i) => [
      store("b_big", i, f32(1)),
    ], 256);
    const plan = planOf([k], [{ name: "embeddings.big", dtype: "f32", shape: [n] }]);
    await assert.rejects(
      () => WebGPUExecutor.create(gpu.ctx!, plan),
      (e: Error) => {
        assert.match(e.message, /tensor 'embeddings\.big'/);
        assert.match(e.message, new RegExp(`maxStorageBufferBindingSize of ${limit}`));
        assert.match(e.message, /k_huge/);
        return true;
      },
    );
  },
});

Deno.test({
  name:
    "webgpu: a kernel binding a buffer the plan lacks is refused in one line, before its ranges are laid out",
  ignore,
  fn: async () => {
    const k = loopKernel("k_orphan", 8, [bind("b_gone", 3, "f32", "read_write", 8)], (i) => [
      store("b_gone", i, f32(1)),
    ]);
    const plan = planOf([k], [{ name: "out", dtype: "f32", shape: [8] }]);
    await assert.rejects(
      () => WebGPUExecutor.create(gpu.ctx!, plan),
      (e: Error) =>
        e instanceof WebGPUError && /kernel k_orphan binds buffer 3, which the plan lacks/.test(e.message),
    );
  },
});

Deno.test({
  name: "webgpu: a kernel whose WGSL does not compile raises an error naming the kernel",
  ignore,
  fn: async () => {
    const k = loopKernel(
      "k012_broken",
      8,
      [bind("b_out", 0, "f32", "write", 8)],
      (i) => [store("b_out", i, f32(1))],
    );
    const plan = planOf([k], [{ name: "out", dtype: "f32", shape: [8] }], {
      wgsl: { k012_broken: "@compute @workgroup_size(64)\nfn main() { let x: f32 = undefined_thing; }\n" },
    });
    await assert.rejects(
      () => WebGPUExecutor.create(gpu.ctx!, plan),
      /kernel k012_broken: WGSL did not compile/,
    );
  },
});

Deno.test({
  name: "webgpu: a pipeline the device rejects, and a step that fails validation, name the kernel",
  ignore,
  fn: async () => {
    const k = loopKernel(
      "k007_fill",
      8,
      [bind("b_out", 0, "f32", "write", 8)],
      (i) => [store("b_out", i, f32(1))],
    );
    const plan = planOf([k], [{ name: "out", dtype: "f32", shape: [8] }]);
    // The plan says read-only, the shader writes: the layout and the shader disagree.
    const readOnly: Plan = {
      ...plan,
      kernels: [{ ...plan.kernels[0], bindings: [{ ...plan.kernels[0].bindings[0], access: "read" }] }],
    };
    await assert.rejects(
      () => WebGPUExecutor.create(gpu.ctx!, readOnly),
      /kernel k007_fill: pipeline creation failed/,
    );
    await withExecutor(plan, async (ex) => {
      ex.gpuBuffer("out").destroy();
      await assert.rejects(() => ex.step(), /kernel k007_fill \(step 0\): .*slot 0 \(out\)/s);
    });
  },
});

Deno.test({
  name: "webgpu: copies, parameter updates, shared pipelines and profiling",
  ignore,
  fn: async () => {
    const n = 300;
    const r = seededRandom(19);
    const p0 = Float32Array.from({ length: n }, () => r.normal());
    const g = Float32Array.from({ length: n }, () => r.normal());
    // Two kernels with the same body and bindings but different names (the same fusion in two layers)
    // emit identical source and share one pipeline. Sharing is decided by the source alone: the compiler's
    // share-sources stage is the one place identical fusions are made to emit identical text.
    const axpy = (name: string, src: string, dst: string, srcId: number, dstId: number) =>
      loopKernel(name, n, [
        bind(src, srcId, "f32", "read", n),
        bind("b_g", 1, "f32", "read", n),
        bind(dst, dstId, "f32", "write", n),
      ], (i) => [store(dst, i, sub(load(src, i, "f32"), mul(f32(0.1), load("b_g", i, "f32"))))]);
    // Rendered as the compiler's emit stage renders them: without their description.
    const kernels = [axpy("k_update_a", "b_p", "b_new", 0, 2), axpy("k_update_b", "b_p", "b_new", 0, 3)]
      .map((k) => ({ ...k, about: [] }));
    const base = planOf(kernels, [
      { name: "p", dtype: "f32", shape: [n], role: "param" },
      { name: "g", dtype: "f32", shape: [n] },
      { name: "new:p", dtype: "f32", shape: [n], role: "output" },
      { name: "twice", dtype: "f32", shape: [n], role: "output" },
      { name: "p_copy", dtype: "f32", shape: [n], role: "output" },
    ]);
    const plan: Plan = {
      ...base,
      steps: [...base.steps, { op: "copy", src: 0, dst: 4, bytes: 4 * n }],
      updates: [{ param: 0, value: 2 }],
    };
    await withExecutor(plan, async (ex) => {
      assert.equal(ex.pipelineCount, 1);
      ex.write("p", p0);
      const first = await ex.run({ g });
      await ex.step();
      const p = await ex.read("p");
      // p - 0.1 * g with or without a fused multiply-add (drivers may contract).
      const c = Math.fround(0.1);
      const close = (got: number, p: number, g: number) =>
        got === Math.fround(p - Math.fround(c * g)) || got === Math.fround(p - c * g);
      for (let i = 0; i < n; i++) {
        const once = first["new:p"][i];
        assert.ok(close(once, p0[i], g[i]), `new:p at ${i}`);
        assert.equal(first.twice[i], once);
        assert.equal(first.p_copy[i], p0[i], "the copy step ran before the update");
        assert.ok(close(p[i], once, g[i]), `two updates applied at ${i}`);
      }
      const prof = await ex.profile(2);
      assert.equal(prof.launches.length, 2);
      assert.deepEqual(prof.launches.map((l) => l.name), ["k_update_a", "k_update_b"]);
      assert.ok(prof.launches.every((l) => l.ns >= 0 && Number.isFinite(l.ns)));
      const lines = formatProfile(prof);
      assert.equal(lines.length, 3);
      assert.match(lines[0], /^k_update_a\s+[\d.]+ us\s+[\d.]+ GB\/s\s+[\d.]+ GFLOP\/s$/);
    });
  },
});

Deno.test({
  name: "webgpu: write refuses data of the wrong length, naming the buffer",
  ignore,
  fn: async () => {
    const k = loopKernel(
      "k_small",
      4,
      [bind("b_x", 0, "f32", "read", 4), bind("b_o", 1, "f32", "write", 4)],
      (i) => [
        store("b_o", i, load("b_x", i, "f32")),
      ],
    );
    const plan = planOf([k], [{ name: "x", dtype: "f32", shape: [2, 2] }, {
      name: "o",
      dtype: "f32",
      shape: [4],
    }]);
    await withExecutor(plan, (ex) => {
      assert.throws(
        () => ex.write("x", [1, 2, 3]),
        /buffer 'x' has 4 elements \(shape \[2, 2\]\), got 3 values/,
      );
      assert.throws(() => ex.write("nope", [1]), /no input, parameter or buffer 'nope'/);
      return Promise.resolve();
    });
  },
});
