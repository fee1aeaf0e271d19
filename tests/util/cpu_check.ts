/**
 * Runs a graph on the CPU backend (fused or not) and on the reference interpreter with the same feeds and
 * compares every output with tests/util/fused_check.ts's rule (|cpu - ref| <= atol + rtol * max|ref| per
 * output tensor).
 */
import { CPU } from "../../engine/backends.ts";
import type { Graph } from "../../ir/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import type { CpuContext } from "../../runtime/cpu/cpu_executor.ts";
import { isUnavailable } from "../../engine/backend_row.ts";
import { assertMatchesReference, type Tolerance } from "./fused_check.ts";

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
    opts.blas === false ? { ...ctx, gemms: "template" } : ctx,
    g,
    opts.fuse,
  );
  try {
    const out = await executor.run(feeds);
    const kernels = compiled.plan.kernels.length;
    const plan = `${opts.fuse ? "fused" : "unfused"}, ${kernels} kernels`;
    assertMatchesReference(ref, out, { tol: opts.tol, device: "cpu", plan, skip: opts.skip });
    return { kernels: compiled.plan.kernels.length, libraryGemms: executor.libraryGemms };
  } finally {
    executor.destroy();
  }
}
