/**
 * A GEMM cuBLASLt has no algorithm for (a heuristic miss, an unsupported shape) runs as the plan's
 * template kernel with one warning line, not an abort (runtime/cuda/cuda_executor.ts libraryCall); equal calls
 * are prepared once, misses included; any other library error still fails.
 */
import assert from "node:assert/strict";
import { CudaError } from "../../runtime/cuda/cuda_errors.ts";
import { libraryCall } from "../../runtime/cuda/cuda_executor.ts";

Deno.test("cuBLASLt fallback: a heuristic miss gives the template kernel and one warning line", () => {
  const calls = new Map<string, string | null>();
  const warnings: string[] = [];
  let made = 0;
  const miss = () => {
    made++;
    throw new CudaError("cuBLASLt has no algorithm for k007_matmul (m 3, n 5, k 7, batch 1, f16 -> f16)");
  };
  assert.equal(libraryCall(calls, "a", miss, "k007_matmul", (l) => warnings.push(l)), null);
  // The same call again: no second attempt, no second warning.
  assert.equal(libraryCall(calls, "a", miss, "k009_matmul", (l) => warnings.push(l)), null);
  assert.equal(made, 1);
  assert.equal(warnings.length, 1);
  assert.match(
    warnings[0],
    /^warning: cuBLASLt has no algorithm .*; kernel k007_matmul runs as the template GEMM/,
  );
  assert.ok(!warnings[0].includes("\n"));
  // A call that works is made once and shared.
  let ok = 0;
  const good = () => `call${++ok}`;
  assert.equal(libraryCall(calls, "b", good, "k010_matmul"), "call1");
  assert.equal(libraryCall(calls, "b", good, "k011_matmul"), "call1");
});

Deno.test("cuBLASLt fallback: other errors are not hidden", () => {
  const calls = new Map<string, string | null>();
  const broken = () => {
    throw new CudaError("cublasLtMatmulDescCreate failed: CUBLAS_STATUS_NOT_INITIALIZED");
  };
  assert.throws(() => libraryCall(calls, "a", broken, "k001_matmul", () => {}), /NOT_INITIALIZED/);
  assert.throws(() =>
    libraryCall(
      calls,
      "c",
      () => {
        throw new TypeError("bug");
      },
      "k002_matmul",
      () => {},
    ), TypeError);
});
