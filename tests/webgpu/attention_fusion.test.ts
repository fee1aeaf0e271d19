/**
 * Attention as a custom fusion (compiler/fusion/attention.ts, compiler/lower/attention_template.ts):
 * when it fires (inference graphs) and when not (training graphs, where the backward pass reads the
 * probabilities; shapes where it does not pay or does not fit), and the fused kernel against the
 * reference interpreter on WebGPU (lavapipe in CI) in f32 and f16, with padded keys, with dropout, and
 * with shapes that exercise partial row tiles and column blocks.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { attentionForward } from "../../cases/fusion_cases.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { ATTENTION_MIN_ROWS } from "../../compiler/fusion/attention.ts";
import { fuseGraph } from "../util/fuse_graph.ts";
import { decomposeComposites } from "../../compiler/passes/decompose.ts";
import type { FusionResult } from "../../compiler/fusion/types.ts";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import { type DType, type Graph } from "../../ir/mod.ts";
import { ModelBuilder } from "../../dsl/mod.ts";
import tiny from "../../models/bert-tiny.ts";
import { checkAgainstReference, F16_TOL, F32_TOL } from "../util/fused_check.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { layerGraph } from "../../cases/layer_graph.ts";
import { initParams } from "../../model_io/init_params.ts";
import { testGpu } from "../util/webgpu.ts";

const gpu = await testGpu();

const PROBS_READ = "attention: the probabilities are read by another kernel (the backward pass)";

const attentionKernels = (r: FusionResult) => r.kernels.filter((k) => k.kind === "attention");
/** The refusals the attention fusion recorded, counted by reason. */
function refusals(r: FusionResult): Record<string, number> {
  const out: Record<string, number> = {};
  for (const d of r.decisions) {
    if (!d.ok && d.reason.startsWith("attention")) out[d.reason] = (out[d.reason] ?? 0) + 1;
  }
  return out;
}

function attentionGraph(
  shape: { b: number; heads: number; s: number; dh: number },
  dtype: DType = "f32",
  dropoutProb = 0,
): Graph {
  const m = new ModelBuilder("attention");
  m.output("out", attentionForward(m, dtype, shape, dropoutProb));
  return decomposeComposites(m.graph);
}

/**
 * Feeds with the last `pad` keys of every row masked out; BERT parameters get their real initial values
 * (random normal weights would make logits in the hundreds, past f16's tolerance for any fused kernel).
 */
function feedsFor(g: Graph, s: number, pad: number, seed: number): Record<string, ArrayLike<number>> {
  const feeds: Record<string, ArrayLike<number>> = randomFeeds(g, seed, {
    mask: (_r, i) => (i % s < s - pad ? 1 : 0),
    attention_mask: (_r, i) => (i % s < s - pad ? 1 : 0),
    rng_key: (r) => r.u32(),
    input_ids: (r) => r.int(1, tiny.config.vocab_size),
    token_type_ids: (_r, i) => (i % s >= s / 2 ? 1 : 0),
  });
  if (g.name.startsWith("bert")) Object.assign(feeds, Object.fromEntries(initParams(g, 5)));
  return feeds;
}

Deno.test("attention fusion: fires for an encoder layer's forward pass (one kernel instead of three)", () => {
  const g = layerGraph({ batch: 2, seq: 8, dropout: true, backward: false });
  const r = fuseGraph(g, { fuse: true });
  const att = attentionKernels(r);
  assert.equal(att.length, 1);
  const ops = new Set<string>([...att[0].members].map((m) => g.nodes[m].op));
  for (const op of ["matmul", "reduce_max", "reduce_sum", "exp", "where"]) assert.ok(ops.has(op), op);
  assert.equal([...att[0].members].filter((m) => g.nodes[m].op === "matmul").length, 2);
  // It writes only the [B, heads, S, dh] context: neither the scores nor the probabilities.
  assert.deepEqual(att[0].roots.map((x) => [...g.nodes[x].type.shape]), [[2, 2, 8, 64]]);
  for (const x of r.materialized) assert.notDeepEqual([...g.nodes[x].type.shape], [2, 2, 8, 8]);
  assert.deepEqual(refusals(r), {});
  // The decision is recorded against the probabilities.
  assert.ok(
    r.decisions.some((d) =>
      d.ok && d.consumerKernel === att[0].id && g.nodes[d.producer].type.shape.join() === "2,2,8,8"
    ),
  );
  // With the fusion off: QKᵀ, the softmax row kernel and PV.
  const off = fuseGraph(g, { fuse: true, attention: false });
  assert.equal(off.kernels.length, r.kernels.length + 2);
  assert.equal(attentionKernels(off).length, 0);
});

Deno.test("attention fusion: fires in every layer of a BERT-tiny inference graph, never in training", () => {
  const infer = compileGraph(
    buildModelGraph({ model: tiny, mode: "infer", precision: "fp16", batchSize: 2, seqLen: 16 }),
    { fuse: true, target: target("wgsl") },
  );
  const layers = tiny.config.num_hidden_layers;
  assert.equal(attentionKernels(infer.fusion).length, layers);
  assert.deepEqual(refusals(infer.fusion), {});
  const names = infer.kernels.map((k) => k.name).filter((n) => n.includes("attention"));
  assert.equal(names.length, layers);

  const train = fuseGraph(
    decomposeComposites(
      buildModelGraph({ model: tiny, mode: "train", precision: "fp32", batchSize: 2, seqLen: 16 }),
    ),
    { fuse: true },
  );
  assert.equal(attentionKernels(train).length, 0);
  assert.deepEqual(refusals(train), { [PROBS_READ]: layers });

  const layer = fuseGraph(layerGraph({ batch: 2, seq: 8, dropout: true, backward: true }), { fuse: true });
  assert.equal(attentionKernels(layer).length, 0);
  assert.deepEqual(refusals(layer), { [PROBS_READ]: 1 });
});

Deno.test("attention fusion: refused where it does not pay or does not fit, with the reason", () => {
  // 512 keys leave room for 4 query rows per workgroup (under ATTENTION_MIN_ROWS): measured no faster.
  const long = fuseGraph(attentionGraph({ b: 1, heads: 2, s: 512, dh: 64 }), { fuse: true });
  assert.equal(attentionKernels(long).length, 0);
  assert.deepEqual(Object.keys(refusals(long)), [
    `attention: with 512 keys and head dim 64 only 4 query rows fit a workgroup (under ${ATTENTION_MIN_ROWS}, measured no faster than three kernels)`,
  ]);
  // 4,096 keys: not even one row of scores fits in 16 KiB of workgroup memory.
  const huge = fuseGraph(attentionGraph({ b: 1, heads: 1, s: 4096, dh: 64 }), { fuse: true });
  assert.equal(attentionKernels(huge).length, 0);
  assert.match(Object.keys(refusals(huge))[0], /^attention: 4096 keys and head dim 64 need \d+ bytes/);
  // 384 keys (8 rows fit) still fuse.
  assert.equal(
    attentionKernels(fuseGraph(attentionGraph({ b: 1, heads: 2, s: 384, dh: 64 }), { fuse: true })).length,
    1,
  );
  // Attention written from primitives is no attention op: nothing names its nodes, so it stays three kernels.
  const m = new ModelBuilder("probs-out");
  const q = m.input("q", "f32", [1, 2, 8, 16]), k = m.input("k", "f32", [1, 2, 8, 16]);
  const scores = q.matmul(k, { transposeB: true });
  const p = scores.sub(scores.max(-1)).exp();
  const probs = p.div(p.sum(-1));
  m.output("probs", probs);
  m.output("out", probs.matmul(m.input("v", "f32", [1, 2, 8, 16])));
  const primitives = fuseGraph(m.graph, { fuse: true }).kernels;
  assert.deepEqual([primitives.filter((k) => k.kind === "attention").length, primitives.length], [0, 3]);
});

/** Numeric cases: [name, graph, tolerance, padded keys]. */
const NUMERIC: [string, () => Graph, typeof F32_TOL, number][] = [
  [
    "encoder layer forward, f32, padded keys, dropout",
    () => layerGraph({ batch: 2, seq: 8, dropout: true, backward: false }),
    F32_TOL,
    3,
  ],
  [
    "attention f32, 20 rows (partial tiles), padded keys, no dropout",
    () => attentionGraph({ b: 2, heads: 3, s: 20, dh: 24 }),
    F32_TOL,
    5,
  ],
  [
    "attention f32, 300 keys (column blocks, 8 rows per tile), dropout",
    () => attentionGraph({ b: 1, heads: 1, s: 300, dh: 16 }, "f32", 0.2),
    F32_TOL,
    7,
  ],
  [
    "attention f16, padded keys, dropout",
    () => attentionGraph({ b: 2, heads: 2, s: 24, dh: 32 }, "f16", 0.1),
    F16_TOL,
    4,
  ],
  [
    "BERT-tiny inference, fp16 GEMMs, padded keys",
    () => buildModelGraph({ model: tiny, mode: "infer", precision: "fp16", batchSize: 2, seqLen: 16 }),
    F16_TOL,
    6,
  ],
  [
    "BERT-tiny inference with dropout on (rng_key)",
    () =>
      buildModelGraph({
        model: tiny,
        mode: "infer",
        precision: "fp32",
        batchSize: 2,
        seqLen: 16,
        dropout: true,
      }),
    F32_TOL,
    6,
  ],
];

for (const [name, build, tol, pad] of NUMERIC) {
  Deno.test({
    name: `webgpu attention kernel vs reference: ${name}`,
    ignore: !gpu.ctx,
    fn: async () => {
      const g = build();
      const fusion = fuseGraph(compileGraph(g, { fuse: true, target: target("wgsl") }).graph, { fuse: true });
      assert.ok(attentionKernels(fusion).length > 0, "the attention fusion did not fire");
      const s = g.nodes.find((n) =>
        n.op === "input" && (n.attrs.name === "mask" || n.attrs.name === "attention_mask")
      )!
        .type.shape[1];
      const res = await checkAgainstReference(gpu.ctx!, g, feedsFor(g, s, pad, 77), { fuse: true, tol });
      assert.ok(res.kernels > 0);
    },
  });
}
