/**
 * Mixed precision with narrowed activation storage (compiler/storage/storage_precision.ts) on WebGPU (lavapipe in
 * CI): every fused-kernel kind of cases/fusion_cases.ts in f32 put through `applyPrecision("fp16")`, and a
 * BERT training step in fp16 (LAMB, dynamic loss scaling), each compared with the reference interpreter:
 * - on the round-trip graph (each narrowed value rounded f32→f16→f32 where another kernel reads it, GEMM
 *   accumulators unrounded inside their kernel): the fused numerics, see FLIP_TOL;
 * - on the graph as compiled (storage not modelled), within the f16 tolerance.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { FUSION_CASES, type FusionCase, graphOf } from "../../cases/fusion_cases.ts";
import { type Compiled, compileGraph } from "../../compiler/driver/compile.ts";
import { OPT } from "../../optimizer/update.ts";
import { applyPrecision, type Precision } from "../../compiler/training_graph/mixed_precision.ts";
import { roundTripGraph } from "../../compiler/storage/storage_precision.ts";
import type { Graph } from "../../ir/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import type { GpuContext } from "../../runtime/webgpu/device.ts";
import { WebGPUExecutor } from "../../runtime/webgpu/webgpu_executor.ts";
import { F16_TOL, type Tolerance } from "../util/fused_check.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { seededRandom } from "../../cases/random.ts";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { FIXTURE_CONFIG as CONFIG, fixtureStep } from "../util/bert_steps.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

/**
 * The fused plan against the round-trip graph: f32 math on both sides, but the reference sums in f64, so
 * a value within an f32 rounding of an f16 rounding boundary can round to the other neighbour (a one-ulp
 * flip, about one value in 10^4, at the plan's f16 GEMM results as much as at narrowed buffers) and move
 * the elements computed from it by up to ~1e-3 of the output's scale. So the bound on the worst element
 * allows flips, and the bound on the median element is f32-tight: against the graph as compiled (which
 * rounds where the plan does not, and not where it stores f16) the median error is ~1e-4.
 */
const FLIP_TOL: Tolerance = { rtol: 2e-3, atol: 1e-6 };
const MEDIAN_TOL: Tolerance = { rtol: 1e-5, atol: 1e-6 };

async function runFused(
  ctx: GpuContext,
  g: Graph,
  feeds: Record<string, ArrayLike<number>>,
  precision: Precision,
): Promise<{ compiled: Compiled; out: Record<string, ArrayLike<number>> }> {
  const compiled = compileGraph(g, { fuse: true, target: target("wgsl"), precision });
  const executor = await WebGPUExecutor.create(ctx, compiled.plan);
  try {
    return { compiled, out: await executor.run(feeds) };
  } finally {
    executor.destroy();
  }
}

/**
 * Checks every output: its largest |gpu - ref| within `tol` and, with `median`, its median one within
 * that (both relative to the output's largest |ref|). Returns the worst ratios to the limits.
 */
function compare(
  got: Record<string, ArrayLike<number>>,
  ref: Map<string, Float64Array>,
  what: string,
  tol: Tolerance,
  median?: Tolerance,
  skip?: (name: string) => boolean,
): { worst: number; median: number } {
  const r = { worst: 0, median: 0 };
  for (const [name, expected] of ref) {
    if (skip?.(name)) continue;
    const g = got[name];
    assert.ok(g, `missing output ${name}`);
    let maxRef = 0;
    const errs = new Float64Array(expected.length);
    for (let i = 0; i < expected.length; i++) {
      maxRef = Math.max(maxRef, Math.abs(expected[i]));
      const d = Math.abs(g[i] - expected[i]);
      errs[i] = Number.isNaN(d) ? Infinity : d;
    }
    errs.sort();
    const check = (err: number, t: Tolerance, which: string) => {
      const limit = t.atol + t.rtol * maxRef;
      assert.ok(
        err <= limit,
        `${what}, ${name}: ${which} |gpu - ref| = ${err.toExponential(3)} > ${limit.toExponential(3)} ` +
          `(max |ref| ${maxRef.toExponential(3)}, ${expected.length} elements)`,
      );
      return err / limit;
    };
    r.worst = Math.max(r.worst, check(errs[errs.length - 1], tol, "max"));
    if (median) r.median = Math.max(r.median, check(errs[errs.length >> 1], median, "median"));
  }
  return r;
}

/** Every f32 activation buffer of the plan has a reason to stay f32; every narrowed one holds f16. */
function checkBuffers(c: Compiled): void {
  for (const b of c.plan.buffers) {
    const id = Number(/^%(\d+) /.exec(b.name)?.[1]);
    if (b.role !== "activation" || !Number.isInteger(id)) {
      // Inputs, outputs and parameters keep their dtype, except a weight every use of which rounds it to
      // f16 (stored f16: storage_precision.ts lowWeights).
      const param = b.role === "param" ? c.plan.params[b.name] === b.id : false;
      const weight = param && [...c.storage.lowWeights].some((w) => c.graph.nodes[w].attrs.name === b.name);
      assert.equal(b.dtype === "f16", weight, `${b.name} (${b.role}) ${weight ? "not " : ""}narrowed`);
      continue;
    }
    if (c.storage.narrowed.has(id)) assert.equal(b.dtype, "f16", b.name);
    else if (b.dtype === "f32") assert.ok(c.storage.kept.has(id), `${b.name} stays f32 without a reason`);
  }
}

/**
 * A fusion case whose result is not a graph output but is read by a GEMM and a row sum (with the backward
 * pass through them when the case has one), so the case's kernels store an activation that other kernels
 * read, and (backward) read an activation gradient other kernels stored.
 */
export function chainedCase(c: FusionCase): Graph {
  return graphOf(
    c.name,
    (m, dt) => {
      const out = c.body(m, dt);
      const last = out.shape[out.shape.length - 1];
      const flat = out.reshape([-1, last]);
      const w = m.param("w_next", [last, 8], "zeros", dt);
      return flat.matmul(w).add(flat.sum(-1));
    },
    "f32",
    c.backward,
  );
}

let narrowedInCases = 0;
for (const c of FUSION_CASES) {
  if (!c.dtypes.includes("f32")) continue;
  Deno.test({
    name: `webgpu fp16 storage vs reference: ${c.name}`,
    ignore: !gpu.ctx,
    fn: async () => {
      const g = applyPrecision(chainedCase(c), "fp16");
      const feeds = randomFeeds(g, 2000 + FUSION_CASES.indexOf(c), c.ints);
      const { compiled, out } = await runFused(gpu.ctx!, g, feeds, "fp16");
      checkBuffers(compiled);
      narrowedInCases += compiled.storage.narrowed.size;
      const rt = roundTripGraph(compiled.graph, compiled.fusion, compiled.storage);
      compare(out, evaluate(rt, feeds, { precision: "f32" }), "round-trip graph", FLIP_TOL, MEDIAN_TOL);
      compare(out, evaluate(g, feeds, { precision: "f32" }), "graph as compiled", F16_TOL);
    },
  });
}

Deno.test({
  name: "webgpu fp16 storage: the fusion cases narrowed activations",
  ignore: !gpu.ctx,
  fn: () => {
    // Loop, LayerNorm, softmax, GEMM-epilogue, batched-GEMM and gather cases each narrow at least one
    // (the attention kernel already stores its f16 GEMM result, and the cross-entropy's are reductions).
    assert.ok(narrowedInCases >= 8, `${narrowedInCases} buffers narrowed over all cases`);
  },
});

Deno.test({
  name: "webgpu fp16 training step with narrowed activations: loss, gradients, optimizer update",
  ignore: !gpu.ctx,
  fn: async () => {
    const [B, S, P] = [3, 12, 4];
    const g = fixtureStep("fp16", [B, S, P]);
    const r = seededRandom(23);
    const feeds = {
      ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: CONFIG.vocab_size }, r, 9),
      ...optimizerStepFeeds(g, r, 1024),
    };
    const { compiled, out } = await runFused(gpu.ctx!, g, feeds, "fp16");
    assert.equal(compiled.storage.precision, "fp16");
    assert.ok(compiled.storage.narrowed.size > 40, `only ${compiled.storage.narrowed.size} buffers narrowed`);
    checkBuffers(compiled);
    // flat.params is the parameters' own buffer, read back after the step copied the update into it;
    // new:flat.params is what the reference computes for it.
    const skip = (name: string) => name === OPT.flatParams;
    const rt = roundTripGraph(compiled.graph, compiled.fusion, compiled.storage);
    const tight = compare(
      out,
      evaluate(rt, feeds, { precision: "f32" }),
      "round-trip",
      FLIP_TOL,
      MEDIAN_TOL,
      skip,
    );
    const loose = compare(
      out,
      evaluate(g, feeds, { precision: "f32" }),
      "as compiled",
      F16_TOL,
      undefined,
      skip,
    );
    console.log(
      `worst / limit: round-trip max ${tight.worst.toFixed(3)}, median ${tight.median.toFixed(3)}; ` +
        `as compiled max ${loose.worst.toFixed(3)}`,
    );
  },
});
