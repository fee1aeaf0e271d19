/**
 * The CUDA emitter on small hand-built kernels: how vector bindings, clamped loads, Philox, wg_reduce,
 * literals, names and bool storage are spelled, and that output is deterministic. (Compiling everything
 * with nvcc: cuda_emit_nvcc.test.ts; running kernels on the CPU: cuda_emit_cpu.test.ts.)
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { emitCUDA } from "../../compiler/codegen/cuda.ts";
import { clampUnprovenLoads } from "../../compiler/codegen/cuda_bounds.ts";
import { legalizeCUDA } from "../../compiler/codegen/legalize_cuda.ts";
import {
  add,
  barrier,
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
  laneOf,
  let_,
  lid,
  lit,
  load,
  lt,
  mod,
  mul,
  ref,
  sload,
  splat,
  store,
  u32,
  un,
  vec,
  wgId,
} from "../../compiler/kernel_ir/ir.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import { loadModel } from "../../models/load.ts";

function kernel(
  body: KStmt[],
  bindings: Partial<KBinding>[],
  opts: Partial<Kernel> = {},
): Kernel {
  return {
    name: "k_test",
    kind: "loop",
    bindings: bindings.map((b, i) => ({
      name: `b${i}`,
      buffer: i,
      t: "f32",
      access: "read",
      elements: 1024,
      ...b,
    })),
    shared: [],
    workgroupSize: 256,
    workgroups: 4,
    body,
    about: ["a test kernel"],
    usesF16: false,
    ...opts,
  };
}

/** The kernel function's body text (without header and prelude). */
const bodyOf = (code: string) => code.slice(code.indexOf('extern "C"'));

Deno.test("CUDA: the ABI: one pointer per binding in order, const for reads, __launch_bounds__, grid", () => {
  const k = kernel(
    [if_(lt(gid, i32(1024)), [store("b0", gid, load("b1", gid, "f32"))])],
    [{ access: "write" }, { access: "read" }, { t: "i32", access: "read_write" }],
  );
  const out = emitCUDA(k);
  assert.match(
    out.code,
    /extern "C" __global__ void __launch_bounds__\(256\) bf_kernel\(float\* __restrict__ b0, const float\* __restrict__ b1, int\* __restrict__ b2\) \{/,
  );
  assert.deepEqual(out.grid, [4, 1, 1]);
  assert.equal(out.workgroupSize, 256);
  assert.match(out.code, /^\/\/ a test kernel\n\/\/ launch: grid \[4, 1, 1\] of 256-thread blocks\n/);
  assert.ok(!out.code.includes("#include"), "no headers for an f32 kernel");
  assert.match(bodyOf(out.code), /const int gid = wg \* 256 \+ lid;/);
});

Deno.test("CUDA: vector bindings are read and written 16 (f16: 8) bytes at a time, arithmetic per lane", () => {
  const x = ref("x", "v4f32");
  const k = kernel(
    [if_(lt(gid, i32(256)), [
      let_("x", load("b1", gid, "v4f32")),
      let_("h", cast(load("b2", gid, "v4f16"), "v4f32")),
      let_("s", load("b3", div(gid, i32(8)), "f32")),
      store("b0", gid, bin("mul", bin("add", x, ref("h", "v4f32")), splat(ref("s", "f32")))),
      store("b4", gid, cast(x, "v4f16")),
    ])],
    [
      { access: "write", vector: 4 },
      { vector: 4 },
      { t: "f16", vector: 4 },
      { elements: 128 },
      { t: "f16", access: "write", vector: 4 },
    ],
  );
  const code = emitCUDA(k).code;
  const body = bodyOf(code);
  assert.match(code, /#include <cuda_fp16.h>/);
  assert.match(code, /struct __align__\(8\) bf_half4 \{/);
  assert.match(body, /const float4 x = reinterpret_cast<const float4\*>\(b1\)\[gid\];/);
  assert.match(body, /reinterpret_cast<const bf_half4\*>\(b2\)\[gid\]/);
  assert.match(body, /const float h_0 = __half2float\(ld\.x\);/);
  assert.match(body, /const float s = b3\[gid \/ 8\];/);
  assert.match(body, /reinterpret_cast<float4\*>\(b0\)\[gid\] = make_float4\(\(x\.x \+ h_0\) \* s, /);
  assert.match(body, /reinterpret_cast<bf_half4\*>\(b4\)\[gid\] = bf_make_half4\(__float2half_rn\(x\.x\), /);
  assert.ok(!/float4 [a-z_0-9]+ = make_float4/.test(body), "no vector temporaries besides loads");
});

Deno.test("CUDA: loads the IR cannot prove in range are clamped; provable ones are left alone", () => {
  const ids = ref("id", "i32");
  const k = kernel(
    [
      // A gathered index (read from a buffer) is unknown: clamped.
      let_("id", load("b1", i32(0), "i32")),
      let_("g", load("b2", ids, "f32")),
      // gid < 1024 under the guard: in range.
      if_(lt(gid, i32(1024)), [let_("a", load("b2", gid, "f32"))]),
      // Without the guard, gid runs to 4·256 - 1 = 1023 of a 1000-element buffer: clamped.
      let_("b", load("b3", gid, "f32")),
      // A split layout: row = wg·16 + lid % 16 is only valid when row < 50.
      let_("row", add(mul(wgId, i32(16)), mod(lid, i32(16)))),
      let_("grp", div(lid, i32(16))),
      let_("valid", lt(ref("row", "i32"), i32(50))),
      if_(ref("valid", "bool"), [let_("c", load("b4", ref("row", "i32"), "f32"))]),
      // grp < 8 means lid < 128, so lid + 128 is a slot of a 256-entry array.
      if_(lt(ref("grp", "i32"), i32(8)), [let_("d", sload("sh", add(lid, i32(128)), "f32"))]),
      // A loop variable stepping by 16 from 0 below 128 reaches 112 at most.
      for_("kk", i32(0), i32(128), i32(16), [
        let_("e", load("b5", add(ref("kk", "i32"), mod(lid, i32(16))), "f32")),
      ]),
    ],
    [
      { access: "write" },
      { t: "i32", elements: 1 },
      { elements: 1024 },
      { elements: 1000 },
      { elements: 50 },
      {
        elements: 128,
      },
    ],
    { shared: [{ name: "sh", t: "f32", size: 256 }] },
  );
  const r = clampUnprovenLoads(k);
  assert.equal(r.clampedLoads, 2);
  const body = bodyOf(emitCUDA(k).code);
  assert.match(body, /const float g = b2\[min\(max\(id, 0\), 1023\)\];/);
  assert.match(body, /const float b = b3\[min\(max\(gid, 0\), 999\)\];/);
  assert.match(body, /const float a = b2\[gid\];/);
  assert.match(body, /const float c = b4\[row\];/);
  assert.match(body, /const float d = sh\[lid \+ 128\];/);
  assert.match(body, /const float e = b5\[kk \+ lid % 16\];/);
  assert.match(emitCUDA(k).code, /\/\/ bounds: 2 load index\(es\) clamped/);
});

Deno.test("CUDA: the bounds analysis reports stores it cannot prove and never trusts mutable locals", () => {
  const k = kernel(
    [
      let_("m", i32(0), true),
      { k: "set", name: "m", value: load("b1", i32(0), "i32") },
      if_(lt(ref("m", "i32"), i32(10)), [store("b0", ref("m", "i32"), f32(1))]),
      let_("v", load("b2", ref("m", "i32"), "f32")),
    ],
    [{ access: "write", elements: 10 }, { t: "i32", elements: 1 }, { elements: 10 }],
  );
  const r = clampUnprovenLoads(k);
  assert.equal(r.clampedLoads, 1);
  assert.equal(r.unprovenStores.length, 1);
  assert.match(r.unprovenStores[0], /store b0: index in \[-Infinity, Infinity\], size 10/);
});

Deno.test("CUDA: philox scalar and four-wide, through __umulhi with the reference's constants", () => {
  const seed = load("b1", i32(0), "u32");
  const step = load("b1", i32(1), "u32");
  const k = kernel(
    [if_(lt(gid, i32(256)), [
      let_("u", { k: "philox", t: "f32", seed, step, stream: 7, index: cast(gid, "u32") }),
      let_("r", { k: "philox", t: "v4f32", seed, step, stream: 3, index: cast(mul(gid, i32(4)), "u32") }),
      store("b0", gid, add(ref("u", "f32"), laneOf(ref("r", "v4f32"), 2))),
    ])],
    [{ access: "write" }, { t: "u32", elements: 2 }],
  );
  const code = emitCUDA(k).code;
  assert.match(code, /__umulhi\(c0, 0xd2511f53u\)/);
  assert.match(code, /__umulhi\(c2, 0xcd9e8d57u\)/);
  assert.match(code, /k0 \+= 0x9e3779b9u;\n\s+k1 \+= 0xbb67ae85u;/);
  assert.match(code, /static_cast<float>\(bits >> 8\) \* \(1\.0f \/ 16777216\.0f\)/);
  const body = bodyOf(code);
  assert.match(body, /const float u = bf_philox\(b1\[0\], b1\[1\], 7u, static_cast<unsigned int>\(gid\)\);/);
  assert.match(
    body,
    /const float4 r = bf_philox4\(b1\[0\], b1\[1\], 3u, static_cast<unsigned int>\(gid \* 4\)\);/,
  );
  assert.match(body, /b0\[gid\] = u \+ r\.z;/);
  // Helpers are include-guarded so that many kernels can share one translation unit.
  assert.match(code, /#ifndef BF_PHILOX_BLOCK_DEFINED\n#define BF_PHILOX_BLOCK_DEFINED\n/);
});

Deno.test("CUDA: wg_reduce is a warp butterfly, one slot per warp, one barrier per group, a fixed fold", () => {
  const reduce = (op: "sum" | "max", v: KExpr, out: string): KStmt => ({
    k: "wg_reduce",
    op,
    t: "f32",
    value: v,
    out,
  });
  const x = load("b1", gid, "f32");
  const k = kernel(
    [
      reduce("sum", x, "s"),
      reduce("max", x, "m"),
      store("b0", wgId, add(ref("s", "f32"), ref("m", "f32"))),
      for_("i", i32(0), i32(3), i32(1), [reduce("sum", x, "t")]),
    ],
    [{ access: "write", elements: 4 }, {}],
    { kind: "reduce" },
  );
  const legal = legalizeCUDA(k);
  assert.deepEqual(legal.kernel.shared.map((s) => `${s.name}[${s.size}]`), [
    "red_f32_0[8]",
    "red_f32_1[8]",
    "red_f32_2[8]",
  ]);
  const code = emitCUDA(k).code;
  const body = bodyOf(code);
  assert.match(code, /__shfl_xor_sync\(0xffffffffu, a, o, 32\)/);
  assert.match(code, /for \(int o = 16; o > 0; o >>= 1\)/);
  assert.match(code, /static __device__ __forceinline__ float bf_block_max_f32_8\(const float\* slots\)/);
  assert.match(
    body,
    /const float bf_warp0 = bf_warp_sum_f32_32\(b1\[gid\]\);\n\s+const float bf_warp1 = bf_warp_max_f32_32\(b1\[gid\]\);\n\s+if \(\(lid & 31\) == 0\) \{\n\s+red_f32_0\[lid \/ 32\] = bf_warp0;\n\s+red_f32_1\[lid \/ 32\] = bf_warp1;\n\s+\}\n\s+__syncthreads\(\);\n\s+const float s = bf_block_sum_f32_8\(red_f32_0\);\n\s+const float m = bf_block_max_f32_8\(red_f32_1\);/,
  );
  // Inside the loop, a trailing barrier keeps the next iteration from overwriting slots being read.
  assert.match(body, /const float t = bf_block_sum_f32_8\(red_f32_2\);\n\s+__syncthreads\(\);\n\s+\}/);
  assert.match(body, /__shared__ float red_f32_0\[8\];/);

  // One warp or less: the butterfly alone, over the block's lanes only, no shared memory.
  const small = emitCUDA({
    ...k,
    workgroupSize: 16,
    body: [reduce("sum", x, "s"), store("b0", wgId, ref("s", "f32"))],
  });
  assert.match(small.code, /__shfl_xor_sync\(0xffffu, a, o, 16\)/);
  assert.match(bodyOf(small.code), /const float s = bf_warp_sum_f32_16\(b1\[gid\]\);/);
  assert.ok(!small.code.includes("__shared__") && !small.code.includes("__syncthreads"));
});

Deno.test("CUDA: literals: shortest exact floats, infinities, -0, INT_MIN, u32, f16 and bf16", () => {
  const vals: [KExpr, string][] = [
    [f32(0.1), "0.1f"],
    [f32(1), "1.0f"],
    [f32(-2.5), "-2.5f"],
    [f32(1e-12), "1e-12f"],
    [f32(-0), "-0.0f"],
    [f32(Infinity), "__uint_as_float(0x7f800000u)"],
    [f32(-Infinity), "__uint_as_float(0xff800000u)"],
    [i32(-(2 ** 31)), "(-2147483647 - 1)"],
    [u32(4294967295), "4294967295u"],
    [lit(0.1, "f16"), "__float2half_rn(0.099975586f)"],
    [lit(0.1, "bf16"), "__float2bfloat16_rn(0.100097656f)"],
  ];
  const k = kernel(
    vals.map(([e], i) => let_(`x${i}`, e)),
    [],
  );
  const body = bodyOf(emitCUDA(k).code);
  vals.forEach(([, want], i) => assert.ok(body.includes(`x${i} = ${want};`), `${want} in\n${body}`));
});

Deno.test("CUDA: names that C++ or CUDA reserve are renamed; bool storage is unsigned int", () => {
  const k = kernel(
    [
      let_("int", i32(1)),
      let_("threadIdx", i32(2)),
      let_("__x", i32(3)),
      let_("bf_kernel", i32(4)),
      let_(
        "_Y",
        add(add(ref("int", "i32"), ref("threadIdx", "i32")), add(ref("__x", "i32"), ref("bf_kernel", "i32"))),
      ),
      store("b0", i32(0), bin("lt", ref("_Y", "i32"), i32(3))),
      store("b1", i32(0), load("b0", i32(1), "bool")),
    ],
    [{ t: "bool", access: "read_write", elements: 2 }, { t: "bool", access: "write", elements: 1 }],
  );
  const body = bodyOf(emitCUDA(k).code);
  assert.match(body, /bf_kernel\(unsigned int\* __restrict__ b0, unsigned int\* __restrict__ b1\)/);
  assert.match(body, /const int int_0 = 1;/);
  assert.match(body, /const int threadIdx_0 = 2;/);
  assert.match(body, /const int v_x = 3;/);
  assert.match(body, /const int vbf_kernel = 4;/);
  assert.match(body, /const int v_Y = int_0 \+ threadIdx_0 \+ \(v_x \+ vbf_kernel\);/);
  assert.match(body, /b0\[0\] = \(v_Y < 3 \? 1u : 0u\);/);
  assert.match(body, /b1\[0\] = \(b0\[1\] != 0u \? 1u : 0u\);/);
});

Deno.test("CUDA: f16 arithmetic is done in f32 and rounded back; math from libm, erf from the prelude", () => {
  const h = load("b1", gid, "f16");
  const k = kernel(
    [if_(lt(gid, i32(16)), [
      store("b0", gid, bin("add", h, h)),
      store("b2", gid, un("erf", un("tanh", un("exp", cast(h, "f32"))))),
      store("b2", add(gid, i32(16)), un("rsqrt", cast(cast(h, "i32"), "f32"))),
    ])],
    [{ t: "f16", access: "write" }, { t: "f16" }, { access: "write" }],
  );
  const code = emitCUDA(k).code;
  const body = bodyOf(code);
  assert.match(
    body,
    /b0\[gid\] = __float2half_rn\(__half2float\(b1\[gid\]\) \+ __half2float\(b1\[gid\]\)\);/,
  );
  assert.match(body, /b2\[gid\] = bf_erf\(tanhf\(expf\(__half2float\(b1\[gid\]\)\)\)\);/);
  assert.match(body, /rsqrtf\(static_cast<float>\(__float2int_rz\(__half2float\(b1\[gid\]\)\)\)\)/);
  assert.match(code, /static __device__ __forceinline__ float bf_erf\(float x\)/);
});

Deno.test("CUDA: barriers and shared arrays; a grid beyond 2^31 - 1 blocks is 2-D with a guard", () => {
  const k = kernel(
    [
      { k: "sstore", arr: "tile", index: lid, value: load("b1", gid, "f32") },
      barrier,
      store("b0", gid, sload("tile", bin("sub", i32(255), lid), "f32")),
    ],
    [{ access: "write" }, {}],
    { shared: [{ name: "tile", t: "f32", size: 256 }] },
  );
  const body = bodyOf(emitCUDA(k).code);
  assert.match(body, /__shared__ float tile\[256\];\n\s+const int lid/);
  assert.match(body, /tile\[lid\] = b1\[gid\];\n\s+__syncthreads\(\);\n\s+b0\[gid\] = tile\[255 - lid\];/);
  const big = legalizeCUDA({ ...k, body: [], bindings: [], workgroups: 3 * 2 ** 30 + 1 });
  assert.deepEqual(big.grid, [1610612737, 2, 1]);
  assert.equal(big.guard, 3 * 2 ** 30 + 1);
  const code = emitCUDA({ ...k, body: [], bindings: [], workgroups: 3 * 2 ** 30 + 1 }).code;
  assert.match(
    code,
    /const int wg = static_cast<int>\(blockIdx\.x \+ blockIdx\.y \* 1610612737u\);\n\s+if \(wg >= 3221225473\) \{\n\s+return;/,
  );
});

Deno.test("CUDA: output is deterministic and independent of the kernel's name", async () => {
  const model = await loadModel("models/bert-tiny.ts");
  const g = buildModelGraph({
    model,
    mode: "train",
    precision: "fp16",
    batchSize: 2,
    seqLen: 16,
    maxPredictions: 3,
  });
  const a = compileGraph(g, { fuse: true, target: target("cuda") });
  const b = compileGraph(g, { fuse: true, target: target("cuda") });
  assert.deepEqual(a.plan.kernels.map((k) => k.source), b.plan.kernels.map((k) => k.source));
  for (const k of a.kernels.slice(0, 10)) {
    assert.equal(emitCUDA(k).code, emitCUDA({ ...k, name: "renamed" }).code);
  }
  // Every kernel of a BERT training step proves all its loads in range: no clamps needed.
  for (const k of a.kernels) {
    const r = clampUnprovenLoads(k);
    assert.equal(r.clampedLoads, 0, k.name);
    assert.deepEqual(r.unprovenStores, [], k.name);
  }
});

Deno.test("CUDA: vector kernels from the vectorizer keep their 4-lane values in scalars", () => {
  const k = kernel(
    [if_(lt(gid, i32(256)), [
      let_("v", vec([f32(1), f32(2), f32(3), f32(4)])),
      let_("w", bin("max", ref("v", "v4f32"), splat(f32(2.5))), true),
      { k: "set", name: "w", value: ref("w", "v4f32") },
      store("b0", gid, ref("w", "v4f32")),
    ])],
    [{ access: "write", vector: 4 }],
  );
  const body = bodyOf(emitCUDA(k).code);
  assert.match(body, /const float v_0 = 1\.0f;/);
  assert.match(body, /\n\s+float w_3 = fmaxf\(v_3, 2\.5f\);/);
  assert.match(body, /reinterpret_cast<float4\*>\(b0\)\[gid\] = make_float4\(w_0, w_1, w_2, w_3\);/);
});

Deno.test("CUDA: a local named like a binding or shared array gets a name of its own", () => {
  const k = kernel(
    [
      let_("b0", f32(1)),
      let_("sh", f32(2)),
      { k: "sstore", arr: "sh", index: lid, value: ref("sh", "f32") },
      store("b0", lid, bin("add", ref("b0", "f32"), sload("sh", lid, "f32"))),
    ],
    [{ access: "write" }],
    { shared: [{ name: "sh", t: "f32", size: 256 }] },
  );
  const body = bodyOf(emitCUDA(k).code);
  assert.match(
    body,
    /const float b0_0 = 1\.0f;\n\s+const float sh_0 = 2\.0f;\n\s+sh\[lid\] = sh_0;\n\s+b0\[lid\] = b0_0 \+ sh\[lid\];/,
  );
});

Deno.test("CUDA: deno task compile --precision bf16 writes cuda-sm90 plans with cuda/*.cu", async () => {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-compile-cuda-" });
  const run = (...args: string[]) =>
    new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-read",
        "--allow-write",
        "--allow-env",
        "cli/compile.ts",
        "models/bert-tiny.ts",
        ...args,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
  try {
    const out = `${dir}/bf16`;
    const r = await run("--precision", "bf16", "--batch-size", "2", "--seq-len", "16", "--out", out);
    assert.ok(r.success, new TextDecoder().decode(r.stderr));
    const plan = JSON.parse(await Deno.readTextFile(`${out}/plan.json`));
    assert.deepEqual([plan.target, plan.language], ["cuda-sm90", "cuda"]);
    type Stored = { source: { file: string }; library?: { epilogue?: { source: { file: string } } } };
    const files = new Set<string>(
      plan.kernels.flatMap((k: Stored) => [
        k.source.file,
        ...(k.library?.epilogue ? [k.library.epilogue.source.file] : []),
      ]),
    );
    // Library GEMMs' epilogue kernels have files of their own.
    assert.ok([...files].some((f) => f.endsWith("_epilogue.cu")), "a bf16 training step has an epilogue");
    for (const f of files) {
      assert.match(f, /^cuda\/k\d+_\w+\.cu$/);
      const text = await Deno.readTextFile(`${out}/${f}`);
      assert.match(text, /^\/\/ Generated by bertfuse: deno task compile /);
      assert.match(text, /extern "C" __global__ void __launch_bounds__\(\d+\) bf_kernel\(/);
    }
    assert.equal([...Deno.readDirSync(`${out}/cuda`)].length, files.size);
    const bad = await run("--precision", "bf16", "--target", "all", "--out", `${dir}/bad`);
    assert.ok(!bad.success);
    assert.match(
      new TextDecoder().decode(bad.stderr),
      /--precision bf16 needs CPU or CUDA: WGSL has no bf16 type/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
