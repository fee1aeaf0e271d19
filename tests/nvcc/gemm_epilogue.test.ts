/**
 * cuBLASLt epilogues and scratch types of library GEMMs (compiler/lower/gemm_library.ts):
 * - a root that is the product plus a bias vector over its columns is written by the call itself with
 *   CUBLASLT_EPILOGUE_BIAS (no epilogue kernel); the bias is, in cuBLASLt's column-major terms, the
 *   vector over the rows of the swapped problem's Dᵀ (runtime/cuda/lt_mapping.ts), so its length is our n;
 * - a bias that is not a packed vector over the columns, or not stored in D's dtype, keeps the epilogue
 *   kernel, and so does a compile that also emits C (the CPU's BLAS call has no epilogue);
 * - the call stores the f16 product the graph defines, read by the kernel computing the rest (GELU);
 * - attention's Q/K/V projections stored heads-major at batch 1 are one call with a batch entry per head
 *   (A shared, batch stride 0; the bias stepped by the head size with BIAS_BATCH_STRIDE).
 * Every plan is run on the CPU shim (tests/util/cuda_cpu.ts: the library call through cuBLASLt's
 * column-major definition with LtCall's descriptors, tests/util/lt_cpu.ts) against the reference
 * interpreter on fresh random inputs; m ≠ n everywhere, so a bias taken over the wrong axis aborts the
 * shim's layout check or misses the reference.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { graphOf } from "../../cases/fusion_cases.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { gelu, type ModelBuilder, type Tensor } from "../../dsl/mod.ts";
import type { DType } from "../../ir/mod.ts";
import type { Plan, PlanKernel } from "../../plan/plan.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { ltDescriptors } from "../../runtime/cuda/lt_mapping.ts";
import { attentionBlock, attentionInts } from "../util/attention_block.ts";
import { CXX, cxxVersion, runOnCpu } from "../util/cuda_cpu.ts";
import { assertMatchesReference, F16_TOL, F32_TOL } from "../util/fused_check.ts";
import { NVCC, NVCC_STRICT, nvccVersion } from "../util/nvcc.ts";

const version = await cxxVersion();
if (!version) console.log(`CUDA-on-CPU epilogue tests ignored: ${CXX} not found`);

type Body = (m: ModelBuilder, dt: DType) => Tensor;

const gemmKernels = (plan: Plan): PlanKernel[] => plan.kernels.filter((k) => k.kind === "matmul");
const bufferNamed = (plan: Plan, name: string) => plan.buffers.find((b) => b.name === name)!.id;

/** Compiles for CUDA, then runs the plan's library path on the CPU shim against the reference. */
async function checkOnShim(name: string, body: Body, dt: DType, backward: boolean, seed: number) {
  const g = graphOf(name, body, dt, backward);
  const compiled = compileGraph(g, { fuse: true, target: target("cuda") });
  if (!version) return compiled;
  const feeds = randomFeeds(g, seed);
  const ref = evaluate(g, feeds, { precision: "f32" });
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-lt-epilogue-" });
  try {
    const got = await runOnCpu(dir, compiled.plan, feeds, true);
    assertMatchesReference(ref, Object.fromEntries(got), {
      tol: dt === "f16" ? F16_TOL : F32_TOL,
      device: "cuda-on-cpu",
      plan: `${compiled.plan.kernels.length} kernels`,
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  return compiled;
}

// A linear layer [5, 7]·[7, 6] + bias[6]: the bias over the output's 6 columns.
const linearBias: Body = (m, dt) =>
  m.param("x", [5, 7], "zeros", dt).matmul(m.param("w", [7, 6], "zeros", dt)).add(
    m.param("bias", [6], "zeros", dt).broadcastTo([5, 6]),
  );

for (const dt of ["f32", "f16"] as DType[]) {
  Deno.test(`BIAS epilogue: a linear layer's bias is added by the call, no epilogue kernel (${dt})`, async () => {
    const c = await checkOnShim("linear + bias", linearBias, dt, false, 9100);
    const [k] = gemmKernels(c.plan);
    const g = k.library!;
    assert.equal(g.epilogue, undefined, "no epilogue kernel");
    assert.deepEqual(g.call.epilogue, {
      kind: "bias",
      bias: { buffer: bufferNamed(c.plan, "bias"), offset: 0, dtype: dt, batchStride: 0 },
    });
    assert.equal(g.call.d.buffer, c.plan.outputs.out);
    // Row-major bias over D's 6 columns = the library's per-row bias of the swapped 6×5 problem.
    const lt = ltDescriptors(g.call);
    assert.deepEqual([lt.m, lt.n, lt.bias?.length, lt.bias?.dtype], [6, 5, 6, dt]);
    assert.deepEqual(c.gemms.map((d) => d.reason), [
      "cuBLASLt writes the output, adding the bias (BIAS epilogue)",
    ]);
  });
}

Deno.test("BIAS epilogue: transposed weight, batched product and a bias reshaped to [1, n]", async () => {
  const body: Body = (m, dt) =>
    m.param("a", [3, 4, 5], "zeros", dt).matmul(m.param("w", [3, 6, 5], "zeros", dt), { transposeB: true })
      .add(m.param("bias", [1, 6], "zeros", dt).broadcastTo([3, 4, 6]));
  for (const dt of ["f32", "f16"] as DType[]) {
    const c = await checkOnShim("batched + bias", body, dt, false, 9110);
    const call = gemmKernels(c.plan)[0].library!.call;
    assert.equal(call.epilogue?.kind, "bias", dt);
    assert.deepEqual([call.batch, call.b.trans], [3, true]);
  }
});

Deno.test("BIAS epilogue: forward and backward of linear + bias, f16 (the gradients' GEMMs stay plain)", async () => {
  const c = await checkOnShim("linear + bias, backward", linearBias, "f16", true, 9120);
  const withBias = gemmKernels(c.plan).filter((k) => k.library?.call.epilogue);
  assert.equal(withBias.length, 1, "only the forward product has a bias");
});

Deno.test("BIAS epilogue: refused for a bias over the rows, a bias of another dtype, and after a permute", async () => {
  const cases: [string, Body, DType][] = [
    // One value per row [5, 1] broadcast over the columns: cuBLASLt's vector runs over our columns.
    [
      "row bias",
      (m, dt) =>
        m.param("x", [5, 7], "zeros", dt).matmul(m.param("w", [7, 6], "zeros", dt)).add(
          m.param("bias", [5, 1], "zeros", dt).broadcastTo([5, 6]),
        ),
      "f32",
    ],
    // An f32 bias on an f16 product stored f16: the bias is not in D's dtype.
    [
      "f32 bias, f16 output",
      (m) =>
        m.param("x", [5, 7], "zeros", "f16").matmul(m.param("w", [7, 6], "zeros", "f16")).cast("f32")
          .add(m.param("bias", [6], "zeros", "f32").broadcastTo([5, 6])).cast("f16"),
      "f16",
    ],
    // The bias added after a transpose of the product (over the product's columns, but in the
    // transpose's coordinates: only an add in the product's own coordinates is taken).
    [
      "bias after a permute",
      (m, dt) =>
        m.param("x", [5, 7], "zeros", dt).matmul(m.param("w", [7, 6], "zeros", dt)).permute([1, 0]).add(
          m.param("bias", [6, 1], "zeros", dt).reshape([6, 1]).broadcastTo([6, 5]),
        ),
      "f32",
    ],
  ];
  for (const [name, body, dt] of cases) {
    const c = await checkOnShim(name, body, dt, false, 9130);
    const g = gemmKernels(c.plan)[0].library!;
    assert.equal(g.call.epilogue, undefined, name);
    // The bias is added by a kernel: the GEMM's epilogue kernel or one after it.
    const bias = bufferNamed(c.plan, "bias");
    const reads = [...c.plan.kernels.flatMap((k) => k.bindings), ...(g.epilogue?.bindings ?? [])];
    assert.ok(reads.some((b) => b.buffer === bias), `${name}: a kernel reads the bias`);
  }
});

Deno.test("BIAS epilogue: off on the C target (the BLAS call has no epilogue)", () => {
  const g = graphOf("linear + bias", linearBias, "f32", false);
  const c = compileGraph(g, { fuse: true, target: target("c") });
  const [k] = gemmKernels(c.plan);
  assert.equal(k.library!.call.epilogue, undefined);
  assert.ok(k.library!.epilogue && k.library!.epilogue, "both keep the epilogue kernel");
});

Deno.test("f16 products: the call stores the f16 product the graph defines, GELU's kernel reads it", async () => {
  const body: Body = (m, dt) =>
    gelu(
      m.param("x", [5, 7], "zeros", dt).matmul(m.param("w", [6, 7], "zeros", dt), { transposeB: true }).add(
        m.param("bias", [6], "zeros", dt).broadcastTo([5, 6]),
      ),
    );
  for (const backward of [false, true]) {
    const c = await checkOnShim("linear + bias + GELU", body, "f16", backward, 9140);
    // GELU is no call's epilogue (gemm_calls.ts RAW_CALL_EPILOGUE): no scratch; the forward call writes the
    // f16 product (with its bias where the pre-activation is saved for the backward), read by GELU's kernel.
    const calls = gemmKernels(c.plan).map((k) => k.library!);
    assert.deepEqual(calls.filter((l) => l.epilogue), [], "no epilogue kernel");
    assert.equal(c.plan.buffers[calls[0].call.d.buffer].dtype, "f16");
  }
});

Deno.test("heads-major projections at batch 1: one call, a batch entry per head, the bias stepped per head", async () => {
  const shape = { b: 1, s: 5, heads: 2, dh: 4 };
  for (const dt of ["f32", "f16"] as DType[]) {
    const g = attentionBlock(shape, dt);
    const c = compileGraph(g, { fuse: true, target: target("cuda") });
    const heads = gemmKernels(c.plan).filter((k) =>
      k.library && !k.library.epilogue && k.library.call.batch === 2 &&
      k.library.call.n === shape.dh && k.library.call.a.batchStride === 0
    );
    // Q, K and V with their biases, and one gradient stored heads-major without one.
    assert.equal(heads.filter((k) => k.library!.call.epilogue).length, 3, dt);
    for (const k of heads) {
      const call = k.library!.call;
      // Head h: the weight's rows h·dh.. (stored [out, in], read transposed), D's head stride s·dh.
      assert.deepEqual([call.m, call.k, call.b.batchStride, call.d.batchStride, call.d.ld], [
        shape.s,
        shape.heads * shape.dh,
        call.b.trans ? shape.dh * call.b.ld : shape.dh,
        shape.s * shape.dh,
        shape.dh,
      ]);
      if (call.epilogue?.kind === "bias") assert.equal(call.epilogue.bias.batchStride, shape.dh);
    }
    if (!version) continue;
    const feeds = randomFeeds(g, 9150, attentionInts(shape.s));
    const ref = evaluate(g, feeds, { precision: "f32" });
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-lt-heads-" });
    try {
      const got = await runOnCpu(dir, c.plan, feeds, true);
      assertMatchesReference(ref, Object.fromEntries(got), {
        // The attention tests' bounds (cuda_attention_library.test.ts): f16 storage through softmax.
        tol: dt === "f16" ? { rtol: 3e-2, atol: 3e-3 } : F32_TOL,
        device: "cuda-on-cpu",
        plan: `${c.plan.kernels.length} kernels`,
        skip: (o) => o === "grad.k.bias",
      });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }
});

const haveNvcc = await nvccVersion();

Deno.test({
  name: `f16 products: a kernel that only loads f16 vectors compiles warning-free with nvcc${
    haveNvcc ? "" : " (nvcc not found)"
  }`,
  ignore: !haveNvcc,
  async fn() {
    // f16 product, f32 output, scaled by an f32 tensor (a plain sum would be the call's C with beta 1,
    // fusion/sums_into_gemms.ts): the kernel reading the product reads four-half vectors and never builds one
    // (bf_make_half4 unused, cuda_prelude.ts).
    const body: Body = (m) => {
      const r = m.param("r", [64, 64], "zeros", "f32");
      return m.param("x", [64, 32], "zeros", "f16").matmul(m.param("w", [32, 64], "zeros", "f16")).cast("f32")
        .mul(r);
    };
    const c = compileGraph(graphOf("f16 scratch, f32 out", body, "f16", false), {
      fuse: true,
      target: target("cuda"),
    });
    const e = c.plan.kernels.find((k) => !k.library)!;
    assert.match(e.source.code, /bf_half4/, "vector loads of the f16 product");
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-lt-nvcc-" });
    try {
      await Deno.writeTextFile(`${dir}/k.cu`, e.source.code);
      const out = await new Deno.Command(NVCC, {
        args: [
          ...NVCC_STRICT,
          "-c",
          `${dir}/k.cu`,
          "-o",
          `${dir}/k.o`,
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const log = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
      assert.ok(out.success && log.trim() === "", log);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("raw products: CUDA, Linear + f32 bias + GELU + Linear stores the f16 product; GELU and its backward read it", async () => {
  // Mixed precision's FFN: an f16 product, an f32 bias (cuBLASLt takes none on an f16 D). As the GEMM's
  // epilogue, bias and GELU would cost a scratch product written and read back, and the pre-activation
  // written beside the activation; instead the call writes the product alone, a loop kernel the
  // activation, and every reader recomputes the pre-activation from the product (remat.ts). Above 64
  // elements, so that the chains are worth recomputing.
  const body: Body = (m, dt) => {
    const x = m.param("x", [16, 24], "zeros", dt).matmul(m.param("w", [80, 24], "zeros", dt), {
      transposeB: true,
    });
    const h = gelu(x.cast("f32").add(m.param("bias", [80], "zeros", "f32").broadcastTo([16, 80])));
    return h.cast(dt).matmul(m.param("w2", [24, 80], "zeros", dt), { transposeB: true });
  };
  const c = await checkOnShim("FFN, f32 bias", body, "f16", true, 9160);
  // The first kernel of the step computes x·wᵀ (16×80 from k = 24).
  const forward = (p: Plan) => p.kernels[0];
  const fwd = forward(c.plan);
  assert.deepEqual([fwd.library?.call.m, fwd.library?.call.n, fwd.library?.call.k], [16, 80, 24]);
  assert.equal(fwd.library!.epilogue, undefined, `${fwd.name} has an epilogue kernel`);
  assert.equal(fwd.library!.call.epilogue, undefined);
  assert.ok(c.plan.kernels.some((k) => k.kind === "loop"), "a loop kernel writes the activation");
  // A C plan keeps the template's free epilogue: the GEMM kernel adds the bias, applies GELU and writes
  // both, and its BLAS call an epilogue kernel.
  const shared = compileGraph(graphOf("FFN, f32 bias", body, "f16", true), {
    fuse: true,
    target: target("c"),
  });
  assert.ok(forward(shared.plan).library!.epilogue, "the C plan's forward GEMM has its epilogue kernel");
});
