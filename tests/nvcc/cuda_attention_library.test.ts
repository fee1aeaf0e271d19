/**
 * Attention's GEMMs as cuBLASLt calls, checked on the CPU shim (tests/util/cuda_cpu.ts: the emitted CUDA
 * built as host C++, each library call run through cuBLASLt's column-major definition with LtCall's
 * descriptors, one call per batch group): BERT's self-attention block (tests/util/attention_block.ts),
 * forward and backward, at batch 1, 2 and 3, f32 and f16, on fresh random inputs against the reference
 * interpreter. Every GEMM must be a library call: heads stored heads-major (compiler/fusion/permuted_storage.ts),
 * results written token-major directly (batch 1), in groups (batch 2) or through the epilogue (batch 3)
 * (compiler/lower/gemm_library.ts directGroupsPay). Without g++ the tests are reported as ignored.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import type { DType } from "../../ir/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { ATTENTION_SHAPES, attentionBlock, attentionInts } from "../util/attention_block.ts";
import { CXX, cxxVersion, runOnCpu } from "../util/cuda_cpu.ts";
import { assertMatchesReference, F32_TOL } from "../util/fused_check.ts";

const version = await cxxVersion();
// f16 storage between the kernels of a backward pass through softmax and dropout: the template path
// misses the f32 reference by 1.3-1.8% of the largest weight gradient (measured). The library path's
// scratch products are f16 where the graph's product is (gemm_library.ts scratchType: one rounding more
// than the template's f32 accumulator), which moves grad.q.bias at batch 1 from 1.8% to 2.4% (seed 7201;
// over seeds 7201-7204 it is as often closer to the reference as farther, and `out` is closer in three
// of four). The bound is the model tests' fp16 one (cuda_emit_cpu.test.ts), tripled.
const ATTENTION_F16_TOL = { rtol: 3e-2, atol: 3e-3 };
if (!version) console.log(`CUDA-on-CPU attention tests ignored: ${CXX} not found`);

for (const dt of ["f32", "f16"] as DType[]) {
  // Batch 3 with 4 heads: the token-major results would need min(3, 4) = 3 groups, which do not pay.
  for (const shape of ATTENTION_SHAPES) {
    const b = shape.b;
    Deno.test({
      name: `CUDA on the CPU: attention forward and backward at batch ${b} (${dt}), every GEMM cuBLASLt`,
      ignore: !version,
      async fn() {
        const g = attentionBlock(shape, dt);
        const compiled = compileGraph(g, { fuse: true, target: target("cuda") });
        assert.deepEqual(compiled.gemms.filter((d) => !d.library), [], "every GEMM is a library call");
        const calls = compiled.plan.kernels.flatMap((k) => (k.library ? [k.library.call] : []));
        // Batch 2's token-major results are written in two groups; batch 1 needs none, batch 3's go
        // through the epilogue (three groups do not pay), and the heads, stored heads-major, never do.
        const grouped = calls.filter((c) => (c.outer ?? 1) > 1).length;
        assert.equal(grouped > 0, b === 2, `calls in groups: ${grouped}`);
        const feeds = randomFeeds(g, 7200 + b, attentionInts(shape.s));
        const ref = evaluate(g, feeds, { precision: "f32" });
        const dir = await Deno.makeTempDir({ prefix: "bertfuse-cuda-attn-" });
        try {
          const got = await runOnCpu(dir, compiled.plan, feeds, true);
          assertMatchesReference(ref, Object.fromEntries(got), {
            tol: dt === "f16" ? ATTENTION_F16_TOL : F32_TOL,
            device: "cuda-on-cpu",
            plan: `${compiled.plan.kernels.length} kernels`,
            // K's bias shifts every score of a row alike; softmax ignores it, so its gradient is zero up
            // to rounding on both sides and is not compared.
            skip: (o) => o === "grad.k.bias",
          });
        } finally {
          await Deno.remove(dir, { recursive: true });
        }
      },
    });
  }
}
