/**
 * The library-GEMM descriptor (compiler/lower/gemm_library.ts) on small graphs: every field of the call
 * for plain, transposed, batched, sliced and cast operands, the epilogue split, and the refusals with
 * their reasons. The numbers these calls produce are checked by tests/nvcc/cuda_emit_cpu.test.ts.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { graphOf } from "../../cases/fusion_cases.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { reshapeView } from "../../compiler/graph/strided_view.ts";
import { bytesMoved, figuresOf } from "../../report/fusion_report.ts";
import type { ModelBuilder, Tensor } from "../../dsl/mod.ts";
import type { DType } from "../../ir/mod.ts";
import type { Plan, PlanKernel } from "../../plan/plan.ts";

function compile(body: (m: ModelBuilder, dt: DType) => Tensor, dt: DType = "f32") {
  const g = graphOf("gemm", body, dt, false);
  return compileGraph(g, { fuse: true, target: target("cuda") });
}

function onlyGemm(plan: Plan): PlanKernel {
  const ks = plan.kernels.filter((k) => k.kind === "matmul");
  assert.equal(ks.length, 1);
  return ks[0];
}

const bufferNamed = (plan: Plan, name: string) => plan.buffers.find((b) => b.name === name)!.id;

Deno.test("library GEMM: plain [5,7]·[7,6] writes the output directly", () => {
  const c = compile((m) => m.param("x", [5, 7], "zeros", "f32").matmul(m.param("w", [7, 6], "zeros", "f32")));
  const k = onlyGemm(c.plan);
  assert.deepEqual(k.library, {
    call: {
      m: 5,
      n: 6,
      k: 7,
      batch: 1,
      a: { buffer: bufferNamed(c.plan, "x"), offset: 0, dtype: "f32", batchStride: 0, trans: false, ld: 7 },
      b: { buffer: bufferNamed(c.plan, "w"), offset: 0, dtype: "f32", batchStride: 0, trans: false, ld: 6 },
      d: { buffer: c.plan.outputs.out, offset: 0, dtype: "f32", ld: 6, trans: false, batchStride: 30 },
      compute: "32F",
    },
  });
  assert.deepEqual(c.gemms.map((d) => d.library), [true]);
});

Deno.test("library GEMM: transposed operands read with their stored leading dimension", () => {
  const tb = onlyGemm(
    compile((m) =>
      m.param("x", [5, 7], "zeros", "f32").matmul(m.param("w", [6, 7], "zeros", "f32"), { transposeB: true })
    ).plan,
  ).library!.call;
  const fields = (c: typeof tb) => [c.m, c.n, c.k, c.a.trans, c.a.ld, c.b.trans, c.b.ld];
  assert.deepEqual(fields(tb), [5, 6, 7, false, 7, true, 7]);
  const ta = onlyGemm(
    compile((m) =>
      m.param("x", [7, 5], "zeros", "f32").matmul(m.param("w", [7, 6], "zeros", "f32"), { transposeA: true })
    ).plan,
  ).library!.call;
  assert.deepEqual(fields(ta), [5, 6, 7, true, 5, false, 6]);
});

Deno.test("library GEMM: a batched product has one batch stride per operand", () => {
  const call = onlyGemm(
    compile((m) => m.param("a", [3, 4, 5], "zeros", "f32").matmul(m.param("b", [3, 5, 2], "zeros", "f32")))
      .plan,
  ).library!.call;
  const strides = [call.batch, call.a.batchStride, call.b.batchStride, call.d.batchStride, call.d.ld];
  assert.deepEqual(strides, [3, 20, 10, 8, 2]);
});

Deno.test("library GEMM: a slice of rows is an element offset and a wider leading dimension", () => {
  const call = onlyGemm(
    compile((m) =>
      m.param("x", [2, 4, 8], "zeros", "f32").slice(1, 2, 3).reshape([2, 8]).matmul(
        m.param("w", [8, 3], "zeros", "f32"),
      )
    ).plan,
  ).library!.call;
  assert.deepEqual([call.a.offset, call.a.ld, call.a.trans, call.m, call.k], [16, 32, false, 2, 8]);
});

Deno.test("library GEMM: f16 operands (no rounding on load); a reader computing more reads the stored product", () => {
  // The graph's product is the call's D (the reference rounds it so): f16 for f16 operands, f32 where they
  // are cast to f32 first. The bias and tanh run in the kernel reading it, not in an epilogue kernel.
  for (const wide of [false, true]) {
    const c = compile((m) => {
      const [x, w] = [m.param("x", [5, 7], "zeros", "f16"), m.param("w", [7, 6], "zeros", "f16")];
      const p = wide ? x.cast("f32").matmul(w.cast("f32")) : x.matmul(w).cast("f32");
      return p.add(m.param("bias", [6], "zeros", "f32")).tanh();
    });
    const g = onlyGemm(c.plan).library!, d = wide ? "f32" : "f16";
    const dtypes = [g.call.a.dtype, g.call.b.dtype, g.call.d.dtype, c.plan.buffers[g.call.d.buffer].dtype];
    assert.deepEqual([...dtypes, g.epilogue], ["f16", "f16", d, d, undefined]);
    const bound = c.plan.kernels.find((k) => k.kind !== "matmul")!.bindings.map((b) => [b.buffer, b.access]);
    const want = [[g.call.d.buffer, "read"], [bufferNamed(c.plan, "bias"), "read"], [
      c.plan.outputs.out,
      "write",
    ]];
    assert.deepEqual(bound.sort(), want.sort());
  }
});

Deno.test("library GEMM: an epilogue the call cannot take (a bias on heads) reads the f16 product from a scratch", () => {
  const c = compile((m) => {
    const h = m.param("x", [8, 8], "zeros", "f16").matmul(m.param("w", [8, 8], "zeros", "f16")).cast("f32")
      .add(m.param("bias", [8], "zeros", "f32")).reshape([2, 4, 2, 4]).permute([0, 2, 1, 3]).cast("f16");
    return h.matmul(m.param("v", [2, 2, 4, 3], "zeros", "f16"));
  });
  const k = c.plan.kernels.find((k) => k.library?.epilogue)!, g = k.library!, e = g.epilogue!;
  const scratch = c.plan.buffers[g.call.d.buffer];
  assert.deepEqual([g.call.d.dtype, scratch.dtype, scratch.bytes], ["f16", "f16", 8 * 8 * 2]);
  assert.match(scratch.name, /matmul product f16 \(cuBLASLt\)/);
  const heads = e.bindings.find((b) => b.access === "write")!.buffer, bias = bufferNamed(c.plan, "bias");
  const want = [[g.call.d.buffer, "read"], [bias, "read"], [heads, "write"]]; // the epilogue's, nothing else
  assert.deepEqual(e.bindings.map((b) => [b.buffer, b.access]).sort(), want.sort());
  assert.match(e.source.code, /const __half\* __restrict__ b\d/, "the scratch is read as __half");
  const calls = c.plan.kernels.reduce((a, x) => a + x.bytesRead + x.bytesWritten, 0); // and the scratch twice
  assert.equal(bytesMoved(c.plan), calls + 2 * scratch.bytes);
  assert.equal(figuresOf(c).launches_per_step, 3, "the call, its epilogue kernel, the second call");
});

Deno.test("library GEMM: refusals name the reason", () => {
  const reason = (body: (m: ModelBuilder, dt: DType) => Tensor) => {
    const c = compile(body);
    assert.deepEqual(c.gemms.map((d) => d.library), [false]);
    assert.equal(onlyGemm(c.plan).library, undefined);
    return c.gemms[0].reason;
  };
  // f32 buffers rounded to f16 on load: cuBLASLt's FAST_16F rounding is undocumented. (An input: a weight
  // only rounded is stored f16 instead, and a weight also read in f32 gets a copy, weight_copies.ts.)
  assert.match(
    reason((m) =>
      m.input("x", "f32", [5, 7]).cast("f16").matmul(m.param("w", [7, 6], "zeros", "f32").cast("f16"))
    ),
    /A is stored f32 and rounded to f16 on load/,
  );
  // An operand computed on load (a broadcast view: no strided matrix has a zero row stride here).
  assert.match(
    reason((m) =>
      m.param("x", [7], "zeros", "f32").broadcastTo([5, 7]).matmul(m.param("w", [7, 6], "zeros", "f32"))
    ),
    /^A is computed on load \(broadcast\)/,
  );
  // Decided on the graph (passes/gemm_calls.ts): fusion leaves a call's product, read twice, in its own
  // kernel, and joins a refused one into its first reader like any template GEMM. Mutant: every matmul raw.
  const stored = (x: (m: ModelBuilder) => Tensor) =>
    compile((m) => {
      const p = x(m).matmul(m.param("w", [7, 6], "zeros", "f32"));
      m.output("e", p.exp());
      return p.tanh();
    }).fusion.decisions.some((d) => /the library GEMM writes its product/.test(d.reason));
  assert.equal(stored((m) => m.param("x", [5, 7], "zeros", "f32")), true);
  assert.equal(stored((m) => m.param("x", [7], "zeros", "f32").broadcastTo([5, 7])), false);
});

Deno.test("library GEMM: attention heads at batch 2 run in two groups of one strided batch each", () => {
  // [B, H] batch axes with strides [S·H·D, D] = [24, 3]: no one stride, so B groups of H entries.
  const heads = (t: Tensor) => t.reshape([2, 4, 2, 3]).permute([0, 2, 1, 3]);
  const c = compile((m) =>
    heads(m.param("q", [2, 4, 6], "zeros", "f32")).matmul(heads(m.param("k", [2, 4, 6], "zeros", "f32")), {
      transposeB: true,
    })
  );
  assert.equal(c.gemms[0].library, true);
  const call = onlyGemm(c.plan).library!.call;
  assert.deepEqual(
    [call.batch, call.outer, call.a.batchStride, call.a.outerStride, call.a.ld, call.b.trans],
    [4, 2, 3, 24, 6, true],
  );
  // The product [2, 2, 4, 4] is the kernel's output, written contiguous in the same groups.
  assert.deepEqual([call.d.batchStride, call.d.outerStride, call.d.ld], [16, 32, 4]);
});

Deno.test("library GEMM: attention heads at batch 1 collapse to one batch stride", () => {
  const heads = (t: Tensor) => t.reshape([1, 4, 2, 3]).permute([0, 2, 1, 3]);
  const call = onlyGemm(
    compile((m) =>
      heads(m.param("q", [1, 4, 6], "zeros", "f32")).matmul(heads(m.param("k", [1, 4, 6], "zeros", "f32")), {
        transposeB: true,
      })
    ).plan,
  ).library!.call;
  // Head h of row s is at s·6 + h·3: batch stride 3, leading dimension 6.
  assert.deepEqual(
    [call.batch, call.m, call.n, call.k, call.a.batchStride, call.a.ld, call.b.trans, call.b.ld],
    [2, 4, 4, 3, 3, 6, true, 6],
  );
});

Deno.test("reshapeView: merges contiguous axes, refuses a permuted merge", () => {
  const v = { shape: [2, 3, 4], strides: [12, 4, 1], offset: 5 };
  assert.deepEqual(reshapeView(v, [6, 4]), { shape: [6, 4], strides: [4, 1], offset: 5 });
  assert.deepEqual(reshapeView(v, [2, 1, 12])?.strides, [12, 0, 1]);
  // [B, H, S, D] permuted to [B, S, H, D] and merged to [B·S, H·D]: S and H are not adjacent in memory.
  assert.equal(reshapeView({ shape: [2, 3, 4, 5], strides: [60, 5, 15, 1], offset: 0 }, [6, 20]), undefined);
});
