/**
 * Attention's GEMMs as BLAS calls on the CPU backend: BERT's self-attention block (tests/util/
 * attention_block.ts), forward and backward, at batch 1, 2 and 3, on fresh random inputs against the
 * reference interpreter. Every GEMM of the plan must run through sgemm: the heads stored heads-major by
 * the projections (compiler/fusion/permuted_storage.ts) and the attention results written token-major, in batch
 * groups where the strides need them (compiler/lower/gemm_library.ts): OpenBLAS's, else the backend's own.
 * Needs a C compiler; without one the tests are reported as ignored with the reason.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { ATTENTION_SHAPES, attentionBlock, attentionInts } from "../util/attention_block.ts";
import { checkCpuAgainstReference, testCpu } from "../util/cpu_check.ts";
import { F32_TOL } from "../util/fused_check.ts";

const cpu = await testCpu();

for (const shape of ATTENTION_SHAPES) {
  const b = shape.b;
  Deno.test({
    name: `cpu: attention forward and backward at batch ${b}, every GEMM a BLAS call, vs reference`,
    ignore: !cpu.ctx,
    fn: async () => {
      const g = attentionBlock(shape, "f32");
      const compiled = compileGraph(g, { fuse: true, target: target("c") });
      const refused = compiled.gemms.filter((d) => !d.library);
      assert.deepEqual(refused, [], "every GEMM is a library call");
      const feeds = randomFeeds(g, 7100 + b, attentionInts(shape.s));
      // K's bias shifts every score of a query row alike, which softmax ignores: its gradient is zero up
      // to rounding on both sides (about 1e-6 against sums of order 1), so it is not compared.
      const skip = (o: string) => o === "grad.k.bias";
      const r = await checkCpuAgainstReference(cpu.ctx!, g, feeds, { fuse: true, tol: F32_TOL, skip });
      assert.equal(r.libraryGemms, compiled.gemms.length);
      // Forward: the Q, K, V and output projections, QKᵀ, PV; backward: dP, dV, dQ, dK, the output
      // projection's input and weight gradients, and the Q, K, V weight gradients (x is an input, so
      // no gradient flows into it).
      assert.equal(r.libraryGemms, 4 + 2 + 4 + 2 + 3);
    },
  });
}
