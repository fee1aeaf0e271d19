/**
 * The WGSL emitter and its legalize rules, without a device: determinism, the shape of the output, each
 * legalize rule, name and literal spelling, and the errors. (tests/webgpu/webgpu_runtime.test.ts runs emitted
 * kernels on a device.)
 */
import assert from "node:assert/strict";
import { fitErf } from "../../tools/fit_erf.ts";
import { printKernel } from "../../compiler/kernel_ir/kernel_print.ts";
import { legalizeWGSL, MAX_WORKGROUP_STORAGE } from "../../compiler/codegen/legalize_wgsl.ts";
import { emitWGSL } from "../../compiler/codegen/wgsl.ts";
import { ERF_LARGE, ERF_SMALL } from "../../compiler/codegen/wgsl_prelude.ts";
import { add, bin, cast, f32, for_, gid, i32, if_, type KBinding } from "../../compiler/kernel_ir/ir.ts";
import { type Kernel, type KStmt, laneOf, let_, lid, lit, load, lt } from "../../compiler/kernel_ir/ir.ts";
import { mul, ref, select, set, splat, store, un, vec, wgId } from "../../compiler/kernel_ir/ir.ts";
import { testGpu } from "../util/webgpu.ts";

/** Every kernel the tests below emit successfully; the last test compiles them all on a device. */
const emitted: { test: string; code: string }[] = [];
let currentTest = "";
function emit(k: Kernel) {
  const t = emitWGSL(k);
  emitted.push({ test: currentTest, code: t.code });
  return t;
}
function test(name: string, fn: () => void) {
  Deno.test(name, () => {
    currentTest = name;
    fn();
  });
}

const binding = (name: string, t: KBinding["t"], access: KBinding["access"], buffer = 0): KBinding => ({
  name,
  buffer,
  t,
  access,
  elements: 1024,
});

function kernel(over: Partial<Kernel> & { body: readonly KStmt[] }): Kernel {
  return {
    name: "k001_test",
    kind: "loop",
    bindings: [binding("b_x", "f32", "read", 0), binding("b_out", "f32", "write", 1)],
    shared: [],
    workgroupSize: 64,
    workgroups: 16,
    about: ["add %3 = %1 + %2   (models/bert.ts:42)", "mul %4"],
    usesF16: false,
    ...over,
  };
}

const reduceSum = (value = load("b_x", lid, "f32"), out = "s"): KStmt => ({
  k: "wg_reduce",
  op: "sum",
  t: "f32",
  value,
  out,
});

const count = (text: string, needle: string) => text.split(needle).length - 1;

/** A kernel touching most of the IR: loads, casts, select, erf, tanh, philox, loops, a reduction. */
const busy = kernel({
  kind: "reduce",
  bindings: [
    binding("b_x", "f16", "read", 0),
    binding("b_mask", "bool", "read", 1),
    binding("b_key", "u32", "read", 2),
    binding("b_out", "f32", "write", 3),
  ],
  body: [
    let_("x", cast(load("b_x", gid, "f16"), "f32")),
    let_("acc", f32(0), true),
    for_("j", lid, i32(1000), i32(64), [set("acc", add(ref("acc", "f32"), un("erf", ref("x", "f32"))))]),
    reduceSum(ref("acc", "f32")),
    let_(
      "keep",
      bin("ge", {
        k: "philox",
        t: "f32",
        seed: load("b_key", i32(0), "u32"),
        step: load("b_key", i32(1), "u32"),
        stream: 7,
        index: cast(gid, "u32"),
      }, f32(0.1)),
    ),
    if_(bin("and", load("b_mask", gid, "bool"), ref("keep", "bool")), [
      store("b_out", gid, un("tanh", mul(ref("s", "f32"), f32(1.1111112)))),
    ], [store("b_out", gid, f32(0))]),
  ],
});

test("emitWGSL is deterministic: the same kernel (or a copy) gives byte-identical text", () => {
  const a = emit(busy);
  const b = emit(structuredClone(busy));
  assert.equal(a.code, b.code);
  assert.deepEqual(a.grid, b.grid);
  assert.equal(emit(busy).code, a.code);
});

test("emitted WGSL: about lines as a comment header, bindings in order, enable f16 when needed", () => {
  const t = emit(busy);
  const lines = t.code.split("\n");
  assert.equal(lines[0], "// add %3 = %1 + %2   (models/bert.ts:42)");
  assert.equal(lines[1], "// mul %4");
  assert.equal(lines[2], "// launch: 16 workgroups of 64 threads");
  // The name is not part of the source, so same-bodied kernels share it.
  assert.equal(emit({ ...busy, name: "k999_other" }).code, t.code);
  assert.match(t.code, /^enable f16;$/m);
  const decls = lines.filter((l) => l.startsWith("@group(0)"));
  assert.deepEqual(decls, [
    "@group(0) @binding(0) var<storage, read> b_x: array<f16>;",
    "@group(0) @binding(1) var<storage, read> b_mask: array<u32>;",
    "@group(0) @binding(2) var<storage, read> b_key: array<u32>;",
    "@group(0) @binding(3) var<storage, read_write> b_out: array<f32>;",
  ]);
  assert.match(t.code, /@compute @workgroup_size\(64\)\nfn main\(/);
  assert.equal(t.workgroupSize, 64);
  assert.deepEqual(t.grid, [16, 1, 1]);
  // One statement per line, two-space indentation, no tabs or trailing blanks.
  assert.ok(lines.every((l) => !/\t|\s$/.test(l)));
  const f32Only = emit(kernel({ body: [store("b_out", gid, load("b_x", gid, "f32"))] }));
  assert.doesNotMatch(f32Only.code, /enable f16/);
});

test("only the prelude helpers a kernel uses are emitted", () => {
  const plain = emit(kernel({ body: [store("b_out", gid, un("exp", load("b_x", gid, "f32")))] })).code;
  assert.doesNotMatch(plain, /fn bf_/);
  assert.match(plain, /b_out\[gid\] = exp\(b_x\[gid\]\);/);
  const code = emit(busy).code;
  for (const f of ["bf_erf", "bf_tanh", "bf_mul_wide", "bf_philox"]) {
    assert.equal(count(code, `fn ${f}(`), 1, f);
  }
  assert.match(code, /bf_philox\(b_key\[0\], b_key\[1\], 7u, u32\(gid\)\)/);
  const erfOnly = emit(kernel({ body: [store("b_out", gid, un("erf", load("b_x", gid, "f32")))] })).code;
  assert.match(erfOnly, /fn bf_erf\(/);
  assert.doesNotMatch(erfOnly, /fn bf_(tanh|philox|mul_wide)\(/);
});

test("f16 arguments of erf/tanh are computed in f32 and rounded back", () => {
  const k = kernel({
    bindings: [binding("b_x", "f16", "read"), binding("b_out", "f16", "write", 1)],
    body: [store("b_out", gid, un("tanh", load("b_x", gid, "f16")))],
  });
  assert.match(emit(k).code, /b_out\[gid\] = f16\(bf_tanh\(f32\(b_x\[gid\]\)\)\);/);
});

test("the prelude's erf coefficients are the ones fit_erf.ts derives", () => {
  const fit = fitErf();
  assert.deepEqual(ERF_SMALL.map(Math.fround), fit.small);
  assert.deepEqual(ERF_LARGE.map(Math.fround), fit.large);
});

test("legalize: bool storage becomes u32, loads compare with 0u, stores select 1u/0u", () => {
  const k = kernel({
    bindings: [binding("b_m", "bool", "read"), binding("b_o", "bool", "write", 1)],
    body: [
      store("b_o", gid, bin("and", load("b_m", gid, "bool"), bin("lt", gid, i32(7)))),
      for_("i", i32(0), i32(2), i32(1), [
        store("b_o", ref("i", "i32"), load("b_m", ref("i", "i32"), "bool")),
      ]),
    ],
  });
  const legal = legalizeWGSL(k);
  assert.deepEqual(legal.kernel.bindings.map((b) => b.t), ["u32", "u32"]);
  const code = emit(k).code;
  assert.match(code, /b_o\[gid\] = select\(0u, 1u, b_m\[gid\] != 0u && gid < 7\);/);
  assert.match(code, /b_o\[i\] = select\(0u, 1u, b_m\[i\] != 0u\);/);
});

test("legalize: adjacent wg_reduce statements share one tree; a reduction in a loop ends with a barrier", () => {
  const two = kernel({
    kind: "reduce",
    workgroupSize: 256,
    body: [
      reduceSum(load("b_x", lid, "f32"), "s"),
      { k: "wg_reduce", op: "max", t: "f32", value: load("b_x", lid, "f32"), out: "m" },
      if_(bin("eq", lid, i32(0)), [store("b_out", wgId, add(ref("s", "f32"), ref("m", "f32")))]),
    ],
  });
  const code = emit(two).code;
  // One barrier after the stores, one after each of the folds 128, 64, ..., 2.
  assert.equal(count(code, "workgroupBarrier();"), 8);
  assert.equal(count(code, "var<workgroup>"), 2);
  assert.match(code, /let s: f32 = red_f32_0\[0\] \+ red_f32_0\[1\];/);
  assert.match(code, /let m: f32 = max\(red_f32_1\[0\], red_f32_1\[1\]\);/);
  assert.match(
    code,
    /if \(lid < 128\) \{\n\s+red_f32_0\[lid\] = red_f32_0\[lid\] \+ red_f32_0\[lid \+ 128\];/,
  );

  const looped = kernel({
    kind: "reduce",
    workgroupSize: 32,
    body: [for_("p", i32(0), i32(3), i32(1), [reduceSum(load("b_x", lid, "f32"), "s")])],
  });
  // Store barrier + folds 16, 8, 4, 2 + the trailing barrier before the next iteration's stores.
  assert.equal(count(emit(looped).code, "workgroupBarrier();"), 6);

  const single = kernel({
    kind: "reduce",
    workgroupSize: 1,
    body: [reduceSum(load("b_x", lid, "f32"), "s")],
  });
  const singleCode = emit(single).code;
  assert.doesNotMatch(singleCode, /workgroupBarrier|var<workgroup>/);
  assert.match(singleCode, /let s: f32 = b_x\[lid\];/);
});

test("legalize: reductions that would overflow workgroup memory reuse their arrays", () => {
  const many = Array.from({ length: 20 }, (_, i) => reduceSum(load("b_x", add(lid, i32(i)), "f32"), `s${i}`));
  const k = kernel({
    kind: "reduce",
    workgroupSize: 256,
    body: many.flatMap((r) => [r, { k: "comment", text: "-" }]),
  });
  const legal = legalizeWGSL(k);
  const bytes = legal.kernel.shared.reduce((n, s) => n + 4 * s.size, 0);
  assert.ok(bytes <= MAX_WORKGROUP_STORAGE, `${bytes} bytes of workgroup memory`);
  assert.equal(legal.kernel.shared.length, 1);
  // Each of the 20 trees: store barrier, 7 folds, trailing barrier.
  assert.equal(count(emit(k).code, "workgroupBarrier();"), 20 * 9);
});

test("legalize: more than 65,535 workgroups become a 2-D grid with an early return", () => {
  const at = (workgroups: number) => emit(kernel({ workgroups, body: [store("b_out", gid, f32(1))] }));
  assert.deepEqual(at(65535).grid, [65535, 1, 1]);
  assert.doesNotMatch(at(65535).code, /return;/);
  const even = at(131070);
  assert.deepEqual(even.grid, [65535, 2, 1]);
  assert.doesNotMatch(even.code, /return;/);
  const odd = at(70001);
  assert.deepEqual(odd.grid, [35001, 2, 1]);
  assert.match(
    odd.code,
    /let wg = i32\(group_id\.x \+ group_id\.y \* 35001u\);\n\s+if \(wg >= 70001\) \{\n\s+return;\n\s+\}\n\s+let gid = wg \* 64 \+ lid;/,
  );
  assert.throws(() => at(65535 * 65535 + 1), /exceed a 65535² grid/);
});

test("legalize errors name the kernel: bf16, workgroup sizes", () => {
  const bf = kernel({ bindings: [binding("b_w", "bf16", "read")], body: [] });
  assert.throws(() => emitWGSL(bf), /kernel k001_test: bf16 needs the CUDA backend \(binding b_w is bf16\)/);
  const bfCast = kernel({ body: [let_("h", cast(load("b_x", gid, "f32"), "bf16"))] });
  assert.throws(() => emitWGSL(bfCast), /bf16 needs the CUDA backend/);
  const odd = kernel({ workgroupSize: 96, body: [reduceSum()] });
  assert.throws(() => emit(odd), /kernel k001_test: wg_reduce needs a power-of-two workgroup size, got 96/);
  assert.doesNotThrow(() => emit(kernel({ workgroupSize: 96, body: [] })));
  assert.throws(() => emitWGSL(kernel({ workgroupSize: 512, body: [] })), /workgroup size 512/);
});

test("emitter errors name the kernel: type mismatches and unknown buffers", () => {
  const wrong = kernel({ body: [store("b_out", gid, cast(gid, "i32"))] });
  assert.throws(() => emitWGSL(wrong), /kernel k001_test: store of a i32 value into f32 binding b_out/);
  const unknown = kernel({ body: [store("b_nope", gid, f32(1))] });
  assert.throws(() => emitWGSL(unknown), /kernel k001_test: store to unknown binding b_nope/);
  const intExp = kernel({ body: [let_("e", un("exp", gid))] });
  assert.throws(() => emitWGSL(intExp), /exp of a i32 value/);
});

test("names WGSL reserves or the emitter uses are renamed consistently", () => {
  const k = kernel({
    bindings: [binding("filter", "f32", "read"), binding("b_out", "f32", "write", 1)],
    body: [
      let_("set", load("filter", gid, "f32")),
      let_("wg", i32(3)),
      let_("max", bin("max", ref("set", "f32"), f32(0))),
      store("b_out", gid, add(ref("max", "f32"), cast(ref("wg", "i32"), "f32"))),
    ],
  });
  const code = emit(k).code;
  assert.match(code, /var<storage, read> filter_: array<f32>;/);
  assert.match(code, /let set_: f32 = filter_\[gid\];/);
  assert.match(code, /let wg_: i32 = 3;/);
  assert.match(code, /let max_: f32 = max\(set_, 0\.0\);/);
  assert.match(code, /b_out\[gid\] = max_ \+ f32\(wg_\);/);
});

test("literals: exact shortest decimals within range, infinities as the largest finite value, typed suffixes, negatives parenthesized", () => {
  const k = kernel({
    bindings: [
      binding("b_out", "f32", "write"),
      binding("b_h", "f16", "write", 1),
      binding("b_u", "u32", "write", 2),
    ],
    body: [
      store("b_out", i32(0), f32(0.1)),
      store("b_out", i32(1), f32(-Infinity)),
      store("b_out", i32(2), mul(f32(-0), f32(3))),
      store("b_out", i32(3), bin("sub", f32(2), f32(-1.5))),
      store("b_h", i32(0), lit(70000, "f16")),
      store("b_h", i32(1), lit(0.1, "f16")),
      store("b_u", i32(0), lit(4294967295, "u32")),
      store("b_out", i32(4), select(lt(gid, i32(-3)), f32(1e-30), f32(16777216))),
      store("b_out", i32(5), f32(3.4028234663852886e38)),
    ],
  });
  const code = emit(k).code;
  assert.match(code, /b_out\[0\] = 0\.1;/);
  // Chrome's compiler rejects constants that are infinite or beyond the largest finite value.
  assert.match(code, /b_out\[1\] = -3\.402823466e\+38;/);
  assert.match(code, /b_out\[2\] = -0\.0 \* 3\.0;/);
  assert.match(code, /b_out\[3\] = 2\.0 - \(-1\.5\);/);
  assert.match(code, /b_h\[0\] = 65500\.0h;/);
  assert.match(code, /b_h\[1\] = 0\.1h;/);
  assert.match(code, /b_u\[0\] = 4294967295u;/);
  assert.match(code, /b_out\[4\] = select\(16777216\.0, 1e-30, gid < -3\);/);
  assert.match(code, /b_out\[5\] = 3\.402823466e\+38;/);
});

/** A four-lane kernel as compiler/lower/vectorize.ts produces them, touching every vector construct. */
const vectorKernel = kernel({
  bindings: [
    { ...binding("b_x", "f32", "read", 0), vector: 4 },
    { ...binding("b_h", "f16", "read", 1), vector: 4 },
    { ...binding("b_m", "bool", "read", 2), vector: 4 },
    binding("b_key", "u32", "read", 3),
    binding("b_s", "f32", "read", 4),
    { ...binding("b_out", "f32", "write", 5), vector: 4 },
    { ...binding("b_i", "i32", "write", 6), vector: 4 },
    { ...binding("b_u", "u32", "write", 7), vector: 4 },
  ],
  usesF16: true,
  body: [
    if_(lt(gid, i32(256)), [
      let_("x", load("b_x", gid, "v4f32")),
      let_("s", load("b_s", i32(0), "f32")),
      let_("e", un("erf", mul(ref("x", "v4f32"), splat(ref("s", "f32"))))),
      let_("t", un("tanh", load("b_h", gid, "v4f16"))),
      let_("r", {
        k: "philox",
        t: "v4f32",
        seed: load("b_key", i32(0), "u32"),
        step: load("b_key", i32(1), "u32"),
        stream: 5,
        index: mul(cast(gid, "u32"), lit(4, "u32")),
      }),
      let_("keep", bin("and", load("b_m", gid, "v4bool"), bin("ge", ref("r", "v4f32"), splat(f32(0.5))))),
      let_("ix", bin("mod", add(splat(mul(gid, i32(4))), vec([0, 1, 2, 3].map(i32))), splat(i32(1000)))),
      let_("g", vec([0, 1, 2, 3].map((c) => load("b_s", laneOf(ref("ix", "v4i32"), c), "f32")))),
      store(
        "b_out",
        gid,
        select(
          ref("keep", "v4bool"),
          add(ref("e", "v4f32"), cast(ref("t", "v4f16"), "v4f32")),
          bin("max", un("reciprocal", ref("g", "v4f32")), splat(f32(0))),
        ),
      ),
      store(
        "b_i",
        gid,
        add(cast(ref("x", "v4f32"), "v4i32"), cast(un("not", ref("keep", "v4bool")), "v4i32")),
      ),
      store("b_u", gid, un("neg", cast(cast(ref("g", "v4f32"), "v4bool"), "v4u32"))),
    ]),
  ],
});

test("vectors: vec4 bindings, splats, lane-wise casts and selects, vector helpers, Philox blocks", () => {
  const code = emit(vectorKernel).code;
  assert.match(code, /^enable f16;$/m);
  const decls = code.split("\n").filter((l) => l.startsWith("@group(0)"));
  assert.deepEqual(decls, [
    "@group(0) @binding(0) var<storage, read> b_x: array<vec4<f32>>;",
    "@group(0) @binding(1) var<storage, read> b_h: array<vec4<f16>>;",
    "@group(0) @binding(2) var<storage, read> b_m: array<vec4<u32>>;",
    "@group(0) @binding(3) var<storage, read> b_key: array<u32>;",
    "@group(0) @binding(4) var<storage, read> b_s: array<f32>;",
    "@group(0) @binding(5) var<storage, read_write> b_out: array<vec4<f32>>;",
    "@group(0) @binding(6) var<storage, read_write> b_i: array<vec4<i32>>;",
    "@group(0) @binding(7) var<storage, read_write> b_u: array<vec4<u32>>;",
  ]);
  // Arithmetic takes the scalar beside the vector; erf and tanh go lane by lane (f16 through f32).
  assert.match(code, /let e: vec4<f32> = bf_erf4\(x \* s\);/);
  assert.match(code, /let t: vec4<f16> = vec4<f16>\(bf_tanh4\(vec4<f32>\(b_h\[gid\]\)\)\);/);
  assert.match(code, /let r: vec4<f32> = bf_philox4\(b_key\[0\], b_key\[1\], 5u, u32\(gid\) \* 4u\);/);
  // Comparisons spell the splat; vector bools are & and |, and their storage is vec4<u32>.
  assert.match(
    code,
    /let keep: vec4<bool> = \(b_m\[gid\] != vec4<u32>\(0u\)\) & \(r >= vec4<f32>\(0\.5\)\);/,
  );
  assert.match(code, /let ix: vec4<i32> = \(gid \* 4 \+ vec4<i32>\(0, 1, 2, 3\)\) % 1000;/);
  assert.match(
    code,
    /let g: vec4<f32> = vec4<f32>\(b_s\[ix\.x\], b_s\[ix\.y\], b_s\[ix\.z\], b_s\[ix\.w\]\);/,
  );
  assert.match(
    code,
    /b_out\[gid\] = select\(max\(1\.0 \/ g, vec4<f32>\(0\.0\)\), e \+ vec4<f32>\(t\), keep\);/,
  );
  assert.match(code, /b_i\[gid\] = vec4<i32>\(x\) \+ select\(vec4<i32>\(0\), vec4<i32>\(1\), !keep\);/);
  assert.match(code, /b_u\[gid\] = 0u - select\(vec4<u32>\(0u\), vec4<u32>\(1u\), g != vec4<f32>\(0\.0\)\);/);
  for (const f of ["bf_erf", "bf_erf4", "bf_tanh", "bf_tanh4", "bf_mul_wide", "bf_philox4"]) {
    assert.equal(count(code, `fn ${f}(`), 1, f);
  }
  assert.doesNotMatch(code, /fn bf_philox\(/);
  const text = printKernel(vectorKernel);
  assert.match(text, /bind 0 b_x: f32\[1024\] as 256 x vec4 read <- buffer 0/);
  assert.match(text, /let ix: v4i32 = \(splat\(gid \* 4\) \+ v4i32\(0, 1, 2, 3\)\) % splat\(1000\)/);
  assert.match(text, /let g: v4f32 = v4f32\(b_s\[ix\.x\], b_s\[ix\.y\], b_s\[ix\.z\], b_s\[ix\.w\]\)/);
});

test("vector spelling errors name the kernel", () => {
  const bad = (e: Parameters<typeof let_>[1]) => kernel({ body: [let_("v", e)] });
  assert.throws(() => emitWGSL(bad(cast(f32(1), "v4f32"))), /kernel k001_test: cast between f32 and v4f32/);
  assert.throws(() => emitWGSL(bad(lit(1, "v4f32"))), /literal of vector type v4f32/);
  assert.throws(() => emitWGSL(bad({ k: "splat", t: "v4f32", a: i32(1) })), /splat of a i32 value to v4f32/);
  assert.throws(
    () => emitWGSL(kernel({ body: [store("b_out", gid, splat(f32(1)))] })),
    /store of a v4f32 value into f32 binding b_out/,
  );
  assert.throws(() => emitWGSL(bad(laneOf(f32(1), 0))), /lane 0 of a f32 value/);
});

test("printKernel dumps a kernel readably", () => {
  const text = printKernel(busy);
  assert.match(text, /^kernel k001_test \(reduce\): 16 workgroups x 64 threads\n/);
  assert.match(text, / {2}bind 1 b_mask: bool\[1024\] read <- buffer 1/);
  assert.match(text, / {2}for j = lid; j < 1000; j \+= 64 \{\n {4}acc = acc \+ erf\(x\)\n {2}\}/);
  assert.match(text, /let s: f32 = wg_reduce_sum\(acc\)/);
  assert.match(text, /philox\(seed=b_key\[0\], step=b_key\[1\], stream=7, index=u32\(gid\)\)/);
  assert.equal(printKernel(structuredClone(busy)), text);
});

const gpu = await testGpu();

Deno.test({
  name: "every kernel emitted above compiles on the device",
  ignore: !gpu.ctx,
  fn: async () => {
    const device = gpu.ctx!.device;
    assert.ok(emitted.length >= 20, `${emitted.length} kernels`);
    for (const { test, code } of emitted) {
      device.pushErrorScope("validation");
      const module = device.createShaderModule({ code });
      device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
      const err = await device.popErrorScope();
      assert.equal(err, null, `kernel from "${test}" did not compile: ${err?.message}\n${code}`);
    }
  },
});
