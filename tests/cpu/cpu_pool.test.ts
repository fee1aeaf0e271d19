/**
 * The CPU backend's thread pool (runtime/cpu/pool.c) against the reference interpreter: GEMMs large
 * enough to be cut into blocks of rows (m > n) or of columns (n > m), with each operand transposed or
 * not (a block's operand addresses differ for each), batched GEMMs run one entry per task, and kernels
 * over many workgroups run in chunks claimed by the pool's threads. Fresh random inputs each.
 */
import assert from "node:assert/strict";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { ModelBuilder } from "../../dsl/mod.ts";
import { F32_TOL } from "../util/fused_check.ts";
import { checkCpuAgainstReference, testCpu } from "../util/cpu_check.ts";

const cpu = await testCpu();
const seed = () => Math.floor(Math.random() * 2 ** 31);

for (const [m, n, k] of [[300, 40, 72], [40, 300, 72]]) {
  for (const transposeA of [false, true]) {
    for (const transposeB of [false, true]) {
      Deno.test({
        name: `pool GEMM ${m}x${n}x${k} in blocks of ${m > n ? "rows" : "columns"}, A${
          transposeA ? "ᵀ" : ""
        } B${transposeB ? "ᵀ" : ""}`,
        ignore: !cpu.ctx?.blas,
        fn: async () => {
          const b = new ModelBuilder("pool_gemm");
          const a = b.input("a", "f32", transposeA ? [k, m] : [m, k]);
          const w = b.input("w", "f32", transposeB ? [n, k] : [k, n]);
          // A tanh after the product: the epilogue kernel reads the whole result, blocks included.
          b.output("y", a.matmul(w, { transposeA, transposeB }).tanh());
          const s = seed();
          const r = await checkCpuAgainstReference(cpu.ctx!, b.graph, randomFeeds(b.graph, s), {
            fuse: true,
            tol: F32_TOL,
          });
          assert.equal(r.libraryGemms, 1, `seed ${s}: the GEMM ran as sgemm blocks`);
        },
      });
    }
  }
}

Deno.test({
  name: "pool: a batched GEMM (one task per entry) and a kernel over many workgroups",
  ignore: !cpu.ctx?.blas,
  fn: async () => {
    const b = new ModelBuilder("pool_batched");
    const q = b.input("q", "f32", [12, 48, 40]);
    const v = b.input("v", "f32", [12, 40, 56]);
    const x = b.input("x", "f32", [700, 96]);
    b.output("p", q.matmul(v));
    b.output("e", x.mul(3).exp());
    const s = seed();
    const r = await checkCpuAgainstReference(cpu.ctx!, b.graph, randomFeeds(b.graph, s), {
      fuse: true,
      tol: F32_TOL,
    });
    assert.equal(r.libraryGemms, 1, `seed ${s}`);
  },
});
