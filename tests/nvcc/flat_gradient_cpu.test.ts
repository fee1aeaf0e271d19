/**
 * The flat gradient rule of the storage policy (compiler/storage/flat_gradients.ts): an fp16 training step planned
 * for CUDA with library GEMMs stores LAMB's flat gradient, its pieces and the `grad.*` outputs f16;
 * plans for WebGPU, the CPU or template GEMMs keep them f32, and so does a layout whose
 * pieces would start off the 256-byte alignment or a profile that keeps a piece a scatter accumulator.
 * Then on the CPU through g++ and the CUDA shim with the library path (tests/util/cuda_cpu.ts), on fresh
 * random inputs against the reference interpreter's round-trip graph: a one-layer BERT step, and a LAMB
 * step over kernel-computed gradients, where the round-trip reference matches elementwise and the one
 * without the gradient's rounding does not; a gradient past f16's 65504 is inf as stored and skips the step.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { seededRandom } from "../../cases/random.ts";
import { compileGraph, type CompileOptions } from "../../compiler/driver/compile.ts";
import { flatLayoutOf } from "../../optimizer/flat_layout.ts";
import { appendOptimizer, appendScaledLoss, OPT, STATE } from "../../optimizer/update.ts";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { applyPrecision } from "../../compiler/training_graph/mixed_precision.ts";
import { roundTripGraph, type StoragePlan } from "../../compiler/storage/storage_precision.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { Graph } from "../../ir/mod.ts";
import { roundF16 } from "../../numeric/half.ts";
import { withLowCopyFeeds } from "../../plan/low_copies.ts";
import { UPDATE_PREFIX } from "../../plan/plan.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { oneLayerBert } from "../util/bert_steps.ts";
import { cxxVersion, planReference, runOnCpu } from "../util/cuda_cpu.ts";
import { assertMatchesReference, F16_TOL } from "../util/fused_check.ts";

const version = await cxxVersion();
const noCxx = version ? "" : " (g++ not found)"; // in test names: the ignored list says why
const sm90 = PROFILES["cuda-sm90"];
const cudaAlone: CompileOptions = { fuse: true, target: target("cuda", sm90) };
const [B, S, P] = [4, 64, 4];

/** A one-layer BERT LAMB step (fp16, dynamic loss scaling) in a layout of `chunk`-element chunks. */
function bertStep(chunk: number): Graph {
  const g = oneLayerBert("bert-flat-gradient").build({
    head: "pretraining",
    mode: "train",
    batchSize: B,
    seqLen: S,
    maxPredictions: P,
  });
  const opt = { kind: "lamb", dynamicScale: true } as const;
  return applyPrecision(
    appendOptimizer(differentiate(g, appendScaledLoss(g)), flatLayoutOf(g, chunk), opt),
    "fp16",
  );
}

/** The stored dtypes of every `grad.*` output and of the flat gradient vector (the concat no output is). */
function gradientTypes(g: Graph, options: CompileOptions): Set<string> {
  const c = compileGraph(g, options);
  const outputs = new Set(c.graph.outputs.values());
  const flat = [...c.fusion.inPlace.concats].filter((id) => !outputs.has(id));
  assert.equal(flat.length, 1, "one flat gradient");
  const grads = [...c.graph.outputs].filter(([name]) => name.startsWith("grad.")).map(([, id]) => id);
  return new Set([...flat, ...grads].map((id) => c.storage.storedType(id)));
}

Deno.test("flat gradient: f16 on CUDA plans with library GEMMs only", () => {
  const g = bertStep(128);
  assert.deepEqual(gradientTypes(g, cudaAlone), new Set(["f16"]));
  for (
    const [what, options] of [
      ["WebGPU", { fuse: true, target: target("wgsl", PROFILES["webgpu-gpu"]) }],
      ["C", { fuse: true, target: target("c", PROFILES.cpu) }],
      ["CUDA, template GEMMs", { ...cudaAlone, target: target("cuda", sm90, false) }],
      // The token-type table stays a scatter: its accumulator is a piece of the flat vector.
      ["CUDA, a profile keeping scatters", { ...cudaAlone, target: target("cuda", PROFILES.cpu) }],
    ] as const
  ) assert.deepEqual(gradientTypes(g, options), new Set(["f32"]), what);
  // 64-element chunks: pieces 128 bytes apart in f16, off the 256-byte binding alignment.
  assert.deepEqual(gradientTypes(bertStep(64), cudaAlone), new Set(["f32"]), "64-element chunks");
});

async function runPlan(plan: Parameters<typeof runOnCpu>[1], feeds: Record<string, ArrayLike<number>>) {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-flat-grad-" });
  try {
    return Object.fromEntries(await runOnCpu(dir, plan, feeds, true, "-O2"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test({
  name: `flat gradient: a one-layer BERT LAMB step (fp16) on the CUDA shim${noCxx}`,
  ignore: !version,
  async fn() {
    const g = bertStep(128);
    const c = compileGraph(g, cudaAlone);
    // A fixed seed: at batch 4 the NSP head's two-element gradients amplify an upstream rounding flip past
    // F16_TOL on some seeds, with this rule or without it (seeds 11 and 17 of 10..40 at HEAD).
    const seed = 12;
    const r = seededRandom(seed);
    const feeds = {
      ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: 99 }, r, r.int(0, 1000)),
      ...optimizerStepFeeds(g, r, 1024, flatLayoutOf(g, 128)),
    };
    const out = await runPlan(c.plan, feeds);
    for (const [name, v] of Object.entries(out)) {
      if (name.startsWith("grad.")) {
        assert.ok(Array.from(v).every((x) => roundF16(x) === x), `${name} is f16`);
      }
    }
    assertMatchesReference(planReference(c, feeds), out, {
      tol: F16_TOL,
      device: `cuda-shim (seed ${seed})`,
      plan: "flat gradient f16",
    });
  },
});

const SHAPES: Record<string, number[]> = {
  "bert.encoder.layer.0.attention.self.query.weight": [48, 40],
  "bert.encoder.layer.0.attention.self.query.bias": [40],
  "cls.predictions.transform.dense.weight": [40, 64],
};

/** LAMB over gradients a kernel computes (3·g), plus one GEMM so the graph is mixed precision. */
function lambGraph(): Graph {
  const g = new Graph("lamb-flat-gradient");
  for (const [name, shape] of Object.entries(SHAPES)) {
    g.add("param", [], { name, init: "zeros" }, { shape, dtype: "f32" });
    const x = g.add("input", [], { name: `g:${name}` }, { shape, dtype: "f32" });
    const three = g.add("const", [], { value: 3 }, { shape, dtype: "f32" });
    g.setOutput(`grad.${name}`, g.add("mul", [x, three], {}, { shape, dtype: "f32" }));
  }
  const x = g.add("input", [], { name: "x" }, { shape: [8, 48], dtype: "f32" });
  const w = g.sources("param").get("bert.encoder.layer.0.attention.self.query.weight")!.id;
  const y = g.add("matmul", [x, w], { transpose_a: false, transpose_b: false }, {
    shape: [8, 40],
    dtype: "f32",
  });
  g.setOutput("y", y);
  appendOptimizer(g, flatLayoutOf(g, 128), { kind: "lamb", dynamicScale: true });
  return applyPrecision(g, "fp16");
}

/** Fraction of elements where a and b differ by more than 1e-6 relative (plus 1e-6 of the largest). */
function differing(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let scale = 0, n = 0;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]));
  for (let i = 0; i < b.length; i++) if (Math.abs(a[i] - b[i]) > 1e-6 * (Math.abs(b[i]) + scale)) n++;
  return n / b.length;
}

Deno.test({
  name: `flat gradient: LAMB reads the gradient as stored, and an f16 overflow skips the step${noCxx}`,
  ignore: !version,
  async fn() {
    const g = lambGraph();
    // fp16 named: the graph was built without applyPrecision (its one GEMM reads a weight copy).
    const c = compileGraph(g, { ...cudaAlone, precision: "fp16" });
    const seed = Date.now() % 100_000;
    const r = seededRandom(seed);
    const feeds: Record<string, ArrayLike<number>> = {
      ...optimizerStepFeeds(g, r, 1024, flatLayoutOf(g, 128)),
    };
    for (const [name, shape] of Object.entries(SHAPES)) {
      const n = shape.reduce((a, b) => a * b, 1);
      feeds[name] = Float32Array.from({ length: n }, () => 0.5 * r.normal());
      feeds[`g:${name}`] = Float32Array.from({ length: n }, () => 1024 * 0.1 * r.normal());
    }
    feeds.x = Float32Array.from({ length: 8 * 48 }, () => r.normal());
    // The plan with the flat gradient, its pieces and the gradient outputs unrounded (the mutant
    // reference: what the check would say if the round-trip graph did not model the rule).
    const outputs = new Set(c.graph.outputs.values());
    const flat = [...c.fusion.inPlace.concats].filter((id) => !outputs.has(id));
    const pieces = [...c.fusion.inPlace.placed].filter(([, p]) => flat.includes(p.concat)).map(([id]) => id);
    const grads = [...c.graph.outputs].filter(([n]) => n.startsWith("grad.")).map(([, id]) => id);
    const kept = new Set([...flat, ...pieces, ...grads]);
    assert.ok([...kept].every((id) => c.storage.narrowed.has(id)), "the flat gradient is stored f16");
    const unrounded: StoragePlan = {
      ...c.storage,
      narrowed: new Set([...c.storage.narrowed].filter((id) => !kept.has(id))),
    };
    const reference = (s: StoragePlan) =>
      evaluate(roundTripGraph(c.graph, c.fusion, s), withLowCopyFeeds(c.plan, feeds), { precision: "f32" });
    const asStored = reference(c.storage), exact = reference(unrounded);
    const out = await runPlan(c.plan, feeds);
    const name = `new:${OPT.flatParams}`;
    // The step each computes, from the old flat vector (the reference's `flat.params`).
    const old = asStored.get(OPT.flatParams)!;
    const step = (w: ArrayLike<number>) => Float64Array.from(old, (o, i) => w[i] - o);
    const want = step(asStored.get(name)!);
    assert.ok(want.some((d) => d !== 0), "the step moved the weights");
    // Rare flips where the backends' f32 sums differ in the last bit and a value lies on a rounding boundary.
    assert.ok(differing(step(out[name]), want) < 0.01, `seed ${seed}: vs the round-trip reference`);
    for (const m of [`new:${OPT.m}`, `new:${OPT.v}`]) {
      assert.ok(differing(out[m], asStored.get(m)!) < 0.01, `seed ${seed}: ${m}`);
    }
    // The moments take g first: without its rounding nearly all of them differ (the step, where u's
    // normalization and f32 weights absorb part of it, about a quarter).
    const m = `new:${OPT.m}`;
    assert.ok(differing(exact.get(m)!, asStored.get(m)!) > 0.5, `seed ${seed}: the rounding is invisible`);
    assert.ok(differing(step(exact.get(name)!), want) > 0.05, `seed ${seed}: invisible in the step`);
    // 3 · 30000 = 90000: finite in f32, inf in f16.
    feeds[`g:${Object.keys(SHAPES)[1]}`] = Float32Array.from({ length: 40 }, (_, i) => (i === 7 ? 30000 : 0));
    const over = await runPlan(c.plan, feeds);
    const state = over[UPDATE_PREFIX + OPT.state];
    assert.equal(state[STATE.overflow], 1, "the step overflowed");
    assert.equal(state[STATE.lossScale], 512, "the loss scale halved");
    assert.deepEqual(Array.from(over[name]), Array.from(asStored.get(OPT.flatParams)!), "no update");
    assert.equal(reference(c.storage).get(UPDATE_PREFIX + OPT.state)![STATE.overflow], 1, "the reference's");
    assert.equal(reference(unrounded).get(UPDATE_PREFIX + OPT.state)![STATE.overflow], 0, "f32: finite");
  },
});
