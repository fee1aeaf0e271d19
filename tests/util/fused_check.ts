/**
 * Runs a graph on WebGPU (fused or not) and on the reference interpreter with the same fresh random
 * feeds, and compares every output: |gpu - ref| <= atol + rtol * max|ref| per output tensor.
 */
import assert from "node:assert/strict";
import { WEBGPU } from "../../engine/backends.ts";
import type { Graph } from "../../ir/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import type { GpuContext } from "../../runtime/webgpu/device.ts";

export interface Tolerance {
  rtol: number;
  atol: number;
}

export const F32_TOL: Tolerance = { rtol: 2e-5, atol: 1e-6 };
/** f16 storage: about 3 decimal digits; a fused kernel rounds once where the reference rounds per op. */
export const F16_TOL: Tolerance = { rtol: 4e-3, atol: 1e-3 };

export interface CheckResult {
  kernels: number;
  worst: { name: string; err: number; scale: number };
}

/**
 * Compares every reference output with the device's: |device - ref| <= atol + rtol * max|ref| per output
 * tensor (a NaN is an infinite error). `label` names the device and the plan in the failure message.
 */
export function assertMatchesReference(
  ref: ReadonlyMap<string, ArrayLike<number>>,
  out: Record<string, ArrayLike<number>>,
  opts: { tol: Tolerance; device: string; plan: string; skip?: (output: string) => boolean },
): CheckResult["worst"] {
  let worst = { name: "", err: 0, scale: 0 };
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
      `${name}: max |${opts.device} - ref| = ${maxErr.toExponential(3)} > ${
        limit.toExponential(3)
      } (max |ref| ${maxRef.toExponential(3)}, ${opts.plan})`,
    );
    if (maxErr / Math.max(limit, 1e-30) > worst.err / Math.max(worst.scale, 1e-30)) {
      worst = { name, err: maxErr, scale: limit };
    }
  }
  return worst;
}

export async function checkAgainstReference(
  ctx: GpuContext,
  g: Graph,
  feeds: Record<string, ArrayLike<number>>,
  opts: { fuse: boolean; tol: Tolerance; skip?: (output: string) => boolean },
): Promise<CheckResult> {
  const ref = evaluate(g, feeds, { precision: "f32" });
  const { executor, compiled } = await WEBGPU.compile(ctx, g, opts.fuse);
  try {
    const out = await executor.run(feeds);
    const kernels = compiled.plan.kernels.length;
    const plan = `${opts.fuse ? "fused" : "unfused"}, ${kernels} kernels`;
    const worst = assertMatchesReference(ref, out, { tol: opts.tol, device: "gpu", plan, skip: opts.skip });
    return { kernels, worst };
  } finally {
    executor.destroy();
  }
}
