/**
 * The emitted CUDA, run on the CPU: every fusion case (cases/fusion_cases.ts, f32 and f16) is compiled to
 * a plan with CUDA kernels, the kernels are built as host C++ with g++ through a small shim (the CUDA
 * built-ins as plain C++: threadIdx/blockIdx, a block's CUDA threads as fibers that __syncthreads switches,
 * __shfl_xor_sync through an exchange array, half and bfloat16 conversions in software), the
 * plan's steps run in order, and every output is compared with the reference interpreter on the same
 * random inputs.
 *
 * What this checks: the spelling's semantics (operators, precedence, casts, rounding, index math,
 * vector loads and lanes, Philox, wg_reduce's warp butterfly and per-warp slots, barriers, shared memory)
 * on real kernels. What it cannot check: GPU-specific behaviour (memory model, warp scheduling, NVRTC).
 * Host libm stands in for CUDA's expf/tanhf (both within a few ulp), so tolerances are the WebGPU tests'.
 * Without g++ the test is reported as ignored. The harness (shim, program, runner) is tests/util/cuda_cpu.ts.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { FUSION_CASES, graphOf, type Tolerance } from "../../cases/fusion_cases.ts";
import { type DType, type Graph, isFloat, numel } from "../../ir/mod.ts";
import type { ModelBuilder, Tensor } from "../../dsl/mod.ts";
import { type Plan } from "../../plan/plan.ts";
import { CXX, cxxVersion, planReference, runOnCpu, SHIM } from "../util/cuda_cpu.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { uniformAt } from "../../numeric/philox.ts";
import { erf } from "../../numeric/erf.ts";
import { cudaPrelude } from "../../compiler/codegen/cuda_prelude.ts";
import { seededRandom } from "../../cases/random.ts";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import type { Precision } from "../../compiler/training_graph/mixed_precision.ts";
import { loadModel } from "../../models/load.ts";

const version = await cxxVersion();
const noCxx = version ? "" : " (g++ not found)"; // in test names: the ignored list says why
const PRECISIONS_AND_LIBRARY = (["fp32", "fp16", "bf16"] as Precision[]).flatMap((p) =>
  [[p, false], [p, true]] as const
);
if (!version) console.log(`CUDA-on-CPU tests ignored: ${CXX} not found`);

// The tolerances of tests/util/fused_check.ts (one rounding per fused kernel vs one per op).
const F32_TOL: Tolerance = { rtol: 2e-5, atol: 1e-6 };
const F16_TOL: Tolerance = { rtol: 4e-3, atol: 1e-3 };

/** Random feeds: normals for floats, small ints unless the case says otherwise (as fused_check does). */
function randomFeeds(
  g: Graph,
  seed: number,
  ints: Record<string, (r: ReturnType<typeof seededRandom>, i: number) => number> = {},
): Record<string, Float64Array> {
  const r = seededRandom(seed);
  const feeds: Record<string, Float64Array> = {};
  for (const n of g.nodes) {
    if (n.op !== "input" && n.op !== "param") continue;
    const name = String(n.attrs.name);
    const gen = ints[name];
    feeds[name] = Float64Array.from(
      { length: numel(n.type.shape) },
      (_, i) => gen ? gen(r, i) : isFloat(n.type.dtype) ? r.normal() : r.int(0, 4),
    );
  }
  return feeds;
}

/** |cuda - ref| <= atol + rtol * max|ref|, per output tensor (as tests/util/fused_check.ts). */
function compare(
  ref: Map<string, ArrayLike<number>>,
  got: Map<string, ArrayLike<number>>,
  tol: Tolerance,
  plan: Plan,
): void {
  for (const [name, expected] of ref) {
    const out = got.get(name);
    assert.ok(out, `missing output ${name}`);
    let maxRef = 0, maxErr = 0;
    for (let i = 0; i < expected.length; i++) {
      maxRef = Math.max(maxRef, Math.abs(expected[i]));
      const e = Math.abs(out[i] - expected[i]);
      if (!(e <= maxErr)) maxErr = Number.isNaN(e) ? Infinity : e;
    }
    const limit = tol.atol + tol.rtol * maxRef;
    assert.ok(
      maxErr <= limit,
      `${name}: max |cuda - ref| = ${maxErr.toExponential(3)} > ${limit.toExponential(3)} ` +
        `(max |ref| ${maxRef.toExponential(3)}, ${plan.kernels.length} kernels)`,
    );
    if (Deno.env.get("CUDA_CPU_VERBOSE")) {
      console.log(`${name}: ${maxErr.toExponential(3)} of ${limit.toExponential(3)}`);
    }
  }
}

for (const c of FUSION_CASES) {
  for (const dtype of c.dtypes) {
    Deno.test({
      name: `CUDA on the CPU vs reference (${dtype}): ${c.name}${noCxx}`,
      ignore: !version,
      async fn() {
        const g = graphOf(c.name, c.body, dtype, c.backward);
        const feeds = randomFeeds(g, 1000 + FUSION_CASES.indexOf(c), c.ints);
        const tol = c.tol?.[dtype] ?? (dtype === "f16" ? F16_TOL : F32_TOL);
        const compiled = compileGraph(g, { fuse: true, target: target("cuda") });
        const ref = evaluate(g, feeds, { precision: "f32" });
        const dir = await Deno.makeTempDir({ prefix: "bertfuse-cuda-cpu-" });
        try {
          compare(ref, await runOnCpu(dir, compiled.plan, feeds), tol, compiled.plan);
        } finally {
          await Deno.remove(dir, { recursive: true });
        }
      },
    });
  }
}

// The library path (PlanKernel.library: bf_gemm per the descriptor, then the epilogue kernel) on the
// fusion cases with a GEMM that qualifies, and on small graphs that exercise every descriptor field:
// transposed operands, leading dimensions wider than the matrix (a slice of rows), element offsets,
// batch strides (a 3-D batched product, attention heads through a permute at batch 1), epilogues.
const LIBRARY_CASES: { name: string; body: (m: ModelBuilder, dt: DType) => Tensor; backward: boolean }[] = [
  ...FUSION_CASES.filter((c) => c.name.startsWith("GEMM epilogue")),
  {
    name: "linear layer with a transposed weight, forward and backward",
    body: (m, dt) =>
      m.param("x", [5, 7], "zeros", dt).matmul(m.param("w", [6, 7], "zeros", dt), { transposeB: true })
        .add(m.param("bias", [6], "zeros", dt)).mul(0.5),
    backward: true,
  },
  {
    name: "a slice of rows (ld 32, offset 16) times a weight, forward and backward",
    body: (m, dt) =>
      m.param("x", [2, 4, 8], "zeros", dt).slice(1, 2, 3).reshape([2, 8])
        .matmul(m.param("w", [8, 3], "zeros", dt)),
    backward: true,
  },
  {
    name: "batched 3-D product with batch strides, forward and backward",
    body: (m, dt) => m.param("a", [3, 4, 5], "zeros", dt).matmul(m.param("b", [3, 5, 2], "zeros", dt)),
    backward: true,
  },
  {
    name: "attention heads through permutes at batch 1, forward and backward",
    body: (m, dt) => {
      const heads = (t: Tensor) => t.reshape([1, 4, 2, 3]).permute([0, 2, 1, 3]);
      const q = heads(m.param("q", [1, 4, 6], "zeros", dt));
      const k = heads(m.param("k", [1, 4, 6], "zeros", dt));
      const v = heads(m.param("v", [1, 4, 6], "zeros", dt));
      return q.matmul(k, { transposeB: true }).mul(0.25).matmul(v).permute([0, 2, 1, 3]).reshape([1, 4, 6]);
    },
    backward: true,
  },
];
for (const c of LIBRARY_CASES) {
  for (const dtype of ["f32", "f16"] as DType[]) {
    Deno.test({
      name: `CUDA on the CPU vs reference (${dtype}), library GEMMs: ${c.name}${noCxx}`,
      ignore: !version,
      async fn() {
        const g = graphOf(c.name, c.body, dtype, c.backward);
        const feeds = randomFeeds(g, 2000 + LIBRARY_CASES.indexOf(c));
        const tol = dtype === "f16" ? F16_TOL : F32_TOL;
        const compiled = compileGraph(g, { fuse: true, target: target("cuda") });
        const lib = compiled.gemms.filter((d) => d.library).length;
        // Mixed plans (a GEMM whose operand is computed on load stays a template kernel) are fine.
        assert.ok(lib > 0, `some GEMM should go to the library: ${JSON.stringify(compiled.gemms)}`);
        const ref = evaluate(g, feeds, { precision: "f32" });
        const dir = await Deno.makeTempDir({ prefix: "bertfuse-cuda-cpu-" });
        try {
          compare(ref, await runOnCpu(dir, compiled.plan, feeds, true), tol, compiled.plan);
        } finally {
          await Deno.remove(dir, { recursive: true });
        }
      },
    });
  }
}

// A whole model: BERT-tiny inference (classification head, one short sequence) in each precision.
// Tolerances are per output tensor, relative to its largest value; the reference rounds every op, a
// fused kernel once, so the gap grows with depth and with narrower storage.
const MODEL_TOL: Record<Precision, Tolerance> = {
  fp32: { rtol: 1e-4, atol: 1e-5 },
  fp16: { rtol: 1e-2, atol: 1e-3 },
  bf16: { rtol: 3e-2, atol: 1e-2 },
};
for (const [precision, library] of PRECISIONS_AND_LIBRARY) {
  const lib = library ? ", library GEMMs" : "";
  Deno.test({
    name: `CUDA on the CPU vs reference: BERT-tiny inference, ${precision}${lib}${noCxx}`,
    ignore: !version,
    async fn() {
      const model = await loadModel("models/bert-tiny.ts");
      const g = buildModelGraph({
        model,
        mode: "infer",
        head: "classification",
        precision,
        batchSize: 1,
        seqLen: 8,
      });
      const feeds = randomFeeds(g, 77, {
        input_ids: (r) => r.int(0, 1000),
        token_type_ids: (r) => r.int(0, 2),
        attention_mask: (_, i) => (i < 6 ? 1 : 0),
      });
      const compiled = compileGraph(g, { fuse: true, target: target("cuda") });
      const ref = evaluate(g, feeds, { precision: "f32" });
      const dir = await Deno.makeTempDir({ prefix: "bertfuse-cuda-cpu-" });
      try {
        if (library) logLibrary(compiled.gemms);
        compare(ref, await runOnCpu(dir, compiled.plan, feeds, library), MODEL_TOL[precision], compiled.plan);
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

// A whole training step — forward, backward with dropout, the fused LAMB update over the flat parameter
// vector (in-place concats at plan offsets), loss scaling — on the small HF fixture configuration.
for (const [precision, library] of PRECISIONS_AND_LIBRARY) {
  const lib = library ? ", library GEMMs" : "";
  Deno.test({
    name: `CUDA on the CPU vs reference: a BERT training step with LAMB, ${precision}${lib}${noCxx}`,
    ignore: !version,
    async fn() {
      const model = await loadModel("tests/fixtures/hf-tiny/pretraining/config.json");
      const [B, S, P] = [2, 8, 3];
      const g = buildModelGraph({
        model,
        mode: "train",
        precision,
        batchSize: B,
        seqLen: S,
        maxPredictions: P,
        optimizer: { kind: "lamb", dynamicScale: precision === "fp16" },
      });
      const r = seededRandom(91);
      const feeds = {
        ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: model.config.vocab_size }, r, 3),
        ...optimizerStepFeeds(g, r, precision === "fp16" ? 1024 : 1),
      };
      const compiled = compileGraph(g, { fuse: true, target: target("cuda") });
      // With low-precision storage the interpreter gets the plan's own roundings.
      const ref = planReference(compiled, feeds, precision === "fp32" ? g : undefined);
      const dir = await Deno.makeTempDir({ prefix: "bertfuse-cuda-cpu-" });
      try {
        const tol = precision === "fp32"
          ? { rtol: 2e-4, atol: 1e-6 }
          : precision === "fp16"
          ? F16_TOL
          : MODEL_TOL.bf16;
        if (library) {
          logLibrary(compiled.gemms);
          assert.ok(compiled.gemms.some((d) => d.library), "some GEMMs of a training step go to the library");
        }
        compare(ref, await runOnCpu(dir, compiled.plan, feeds, library), tol, compiled.plan);
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

/** How many GEMMs ran as library calls (CUDA_CPU_VERBOSE=1). */
function logLibrary(gemms: readonly { library: boolean }[]): void {
  if (Deno.env.get("CUDA_CPU_VERBOSE")) {
    console.log(`library GEMMs: ${gemms.filter((d) => d.library).length} of ${gemms.length}`);
  }
}

Deno.test({
  name: `CUDA on the CPU: the Philox prelude is the reference's stream bit for bit${noCxx}`,
  ignore: !version,
  async fn() {
    const r = seededRandom(9);
    // Site words across the whole u32 range (the carries of the 64-bit products), indices to 2^32 - 1.
    const sites = Array.from({ length: 200 }, (_, i) => {
      const index = i < 100 ? r.u32() : i;
      return [r.u32(), i % 3 === 0 ? 0xffffffff : r.u32(), r.u32(), (index & ~3) >>> 0] as const;
    });
    const prelude = cudaPrelude({
      helpers: new Set(["bf_philox", "bf_philox4"]),
      reductions: new Map(),
      warpWidth: 32,
      warps: 1,
    });
    const main = [
      "int main() {",
      "  unsigned s[4];",
      '  while (std::scanf("%u %u %u %u", &s[0], &s[1], &s[2], &s[3]) == 4) {',
      "    const float4 q = bf_philox4(s[0], s[1], s[2], s[3]);",
      '    std::printf("%u %u %u %u", bf_bits(q.x), bf_bits(q.y), bf_bits(q.z), bf_bits(q.w));',
      '    for (unsigned j = 0; j < 4; ++j) std::printf(" %u", bf_bits(bf_philox(s[0], s[1], s[2], s[3] + j)));',
      '    std::printf("\\n");',
      "  }",
      "}",
    ].join("\n");
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-philox-" });
    try {
      await Deno.writeTextFile(`${dir}/p.cpp`, `${SHIM}\n${prelude}\n${main}\n`);
      const build = await new Deno.Command(CXX, {
        args: ["-std=c++20", "-O1", "-pthread", `${dir}/p.cpp`, "-o", `${dir}/p`],
        stderr: "piped",
      }).output();
      assert.ok(build.success, new TextDecoder().decode(build.stderr));
      const child = new Deno.Command(`${dir}/p`, { stdin: "piped", stdout: "piped" }).spawn();
      const w = child.stdin.getWriter();
      await w.write(new TextEncoder().encode(sites.map((x) => x.join(" ")).join("\n") + "\n"));
      await w.close();
      const lines = new TextDecoder().decode((await child.output()).stdout).trim().split("\n");
      assert.equal(lines.length, sites.length);
      sites.forEach(([seed, step, stream, index], i) => {
        const got = lines[i].split(" ").map(Number);
        // The float's bits: every uniform is exact in f32, so they must be equal, not close.
        const want = [0, 1, 2, 3].map((j) =>
          new Uint32Array(Float32Array.of(uniformAt(seed, step, stream, index + j)).buffer)[0]
        );
        assert.deepEqual(got, [...want, ...want], `site ${[seed, step, stream, index]}`);
      });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: `CUDA on the CPU: the erf prelude is within 2e-7 of numeric/erf.ts${noCxx}`,
  ignore: !version,
  async fn() {
    const prelude = cudaPrelude({
      helpers: new Set(["bf_erf"]),
      reductions: new Map(),
      warpWidth: 32,
      warps: 1,
    });
    const main = [
      "int main() {",
      '  for (int i = -5000; i <= 5000; ++i) std::printf("%.9g\\n", bf_erf(i * 0.001f));',
      "}",
    ].join("\n");
    const dir = await Deno.makeTempDir({ prefix: "bertfuse-erf-" });
    try {
      await Deno.writeTextFile(`${dir}/e.cpp`, `${SHIM}\n${prelude}\n${main}\n`);
      const build = await new Deno.Command(CXX, {
        args: ["-std=c++20", "-O1", "-pthread", `${dir}/e.cpp`, "-o", `${dir}/e`],
        stderr: "piped",
      }).output();
      assert.ok(build.success, new TextDecoder().decode(build.stderr));
      const out = await new Deno.Command(`${dir}/e`, { stdout: "piped" }).output();
      const got = new TextDecoder().decode(out.stdout).trim().split("\n").map(Number);
      let worst = 0;
      got.forEach((y, i) => (worst = Math.max(worst, Math.abs(y - erf(Math.fround((i - 5000) * 0.001))))));
      assert.ok(worst <= 2e-7, `max |bf_erf - erf| = ${worst}`);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
