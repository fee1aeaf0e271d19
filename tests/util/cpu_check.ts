/**
 * Runs a graph on the CPU backend (fused or not) and on the reference interpreter with the same feeds and
 * compares every output: |cpu - ref| <= atol + rtol * max|ref| per output tensor (the rule of
 * tests/util/fused_check.ts, which does the same on WebGPU).
 */
import assert from "node:assert/strict";
import { CPU } from "../../engine/backends.ts";
import type { Graph } from "../../ir/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import type { CpuContext } from "../../runtime/cpu/executor.ts";
import { isUnavailable } from "../../engine/backend_row.ts";
import type { Tolerance } from "./fused_check.ts";

/** The CPU backend's context, or why the tests that need it are ignored. */
export async function testCpu(): Promise<{ ctx?: CpuContext; why?: string }> {
  const ctx = await CPU.probe();
  if (isUnavailable(ctx)) {
    console.log(`CPU backend tests ignored: ${ctx.unavailable}`);
    return { why: ctx.unavailable };
  }
  return { ctx };
}

export async function checkCpuAgainstReference(
  ctx: CpuContext,
  g: Graph,
  feeds: Record<string, ArrayLike<number>>,
  opts: { fuse: boolean; tol: Tolerance; blas?: boolean; skip?: (output: string) => boolean },
): Promise<{ kernels: number; libraryGemms: number }> {
  const ref = evaluate(g, feeds, { precision: "f32" });
  const { executor, compiled } = await CPU.compile(
    opts.blas === false ? { ...ctx, blas: undefined } : ctx,
    g,
    opts.fuse,
  );
  try {
    const out = await executor.run(feeds);
    for (const [name, expected] of ref) {
      if (opts.skip?.(name)) continue;
      const got = out[name];
      assert.ok(got, `missing output ${name}`);
      assert.equal(got.length, expected.length, name);
      let maxRef = 0, maxErr = 0;
      for (let i = 0; i < expected.length; i++) {
        maxRef = Math.max(maxRef, Math.abs(expected[i]));
        const e = Math.abs(got[i] - expected[i]);
        if (!(e <= maxErr)) maxErr = Number.isNaN(e) ? Infinity : e;
      }
      const limit = opts.tol.atol + opts.tol.rtol * maxRef;
      assert.ok(
        maxErr <= limit,
        `${name}: max |cpu - ref| = ${maxErr.toExponential(3)} > ${limit.toExponential(3)} (max |ref| ${
          maxRef.toExponential(3)
        }, ${opts.fuse ? "fused" : "unfused"}, ${compiled.plan.kernels.length} kernels)`,
      );
    }
    return { kernels: compiled.plan.kernels.length, libraryGemms: executor.libraryGemms };
  } finally {
    executor.destroy();
  }
}
