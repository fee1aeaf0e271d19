/**
 * Fuzz seeds that failed through the CUDA shim, replayed alone (fused, template GEMMs): each must pass.
 * Without g++ it is ignored.
 */
import assert from "node:assert/strict";
import { checkBatch } from "../../cases/fuzz/check.ts";
import { CXX, cxxVersion } from "../util/cuda_cpu.ts";
import { cudaShimDevice } from "../util/fuzz_devices.ts";

const version = await cxxVersion();
if (!version) console.log(`CUDA fuzz regressions ignored: ${CXX} not found`);

const FIXED: readonly [number, string][] = [
  [165904013, "a small root hoisted into a GEMM epilogue read the GEMM's result through a permute"],
  [165904022, "an f16 intermediate past f16's range (∞, then 0·∞ NaN in the reference) stays finite fused"],
];

for (const [seed, what] of FIXED) {
  Deno.test({
    name: `fuzz seed ${seed} on the CUDA shim, fused, template GEMMs: ${what}`,
    ignore: !version,
    fn: async () => {
      const report = await checkBatch([seed], true, cudaShimDevice(false));
      const failures = report.verdicts.flatMap((v) => v.failures.map((f) => f.message));
      assert.deepEqual(failures, []);
    },
  });
}
