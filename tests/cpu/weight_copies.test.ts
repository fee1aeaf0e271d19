/**
 * Low-precision weight copies for library GEMMs (compiler/passes/low_weight_copies.ts, storage_precision.ts
 * `weightsReadOnlyLow`): with CUDA among the targets, no GEMM is refused the library for reading an f32
 * weight rounded on load; in training each weight's copy is optimizer state (an input the GEMMs read,
 * rewritten in place by the optimizer's last pass), or, where it cannot start on the binding alignment, a
 * cast written by its own kernel before the GEMMs read it; inference weights are stored low instead, with
 * the same values; a WGSL-only compile is unchanged. (Numbers: tests/cpu/weight_copies_lifecycle.test.ts
 * and tests/nvcc/weight_copies_plan_cpu.test.ts.)
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { QUIET } from "../../compiler/pipeline/debug.ts";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import type { Precision } from "../../compiler/training_graph/mixed_precision.ts";
import { lowWeightCopies } from "../../compiler/passes/low_weight_copies.ts";
import { roundTripGraph } from "../../compiler/storage/storage_precision.ts";
import { seededRandom } from "../../cases/random.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { loadModel } from "../../models/load.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { LOW_COPY_PREFIX } from "../../plan/low_copies.ts";
import { flatNames } from "../../optimizer/feeds.ts";
import type { Plan } from "../../plan/plan.ts";
import { copiedParams, copyTrainGraph } from "../util/weight_copies_check.ts";

const F32_WEIGHT = /stored f32 and rounded/;

async function trainGraph(precision: Precision) {
  const model = await loadModel("tests/fixtures/hf-tiny/pretraining/config.json");
  const shape = { batch: 2, seq: 8, predictions: 3, vocab: model.config.vocab_size };
  const g = buildModelGraph({
    model,
    mode: "train",
    precision,
    batchSize: shape.batch,
    seqLen: shape.seq,
    maxPredictions: shape.predictions,
    optimizer: { kind: "lamb", dynamicScale: precision === "fp16" },
  });
  const r = seededRandom(5);
  const feeds = { ...batchFeeds(g, shape, r, 3), ...optimizerStepFeeds(g, r, 1024) };
  return { g, feeds };
}

const where = (p: Plan, id: number) => `${p.buffers[id].slot}@${p.buffers[id].offset ?? 0}`;

for (const [precision, chunk] of [["fp16", 64], ["bf16", 64], ["fp16", 128]] as const) {
  Deno.test(`weight copies (${precision} training, chunk ${chunk}): every weight GEMM reads a low copy, kept by the optimizer where it can`, async () => {
    const { g } = chunk === 64 ? await trainGraph(precision) : await copyTrainGraph(precision, chunk);
    const withoutCopies = { ...QUIET, skipPasses: new Set(["weight-copies"]) };
    const before = compileGraph(g, { fuse: true, target: target("cuda"), flags: withoutCopies });
    const baseline = before.gemms.filter((d) => !d.library && F32_WEIGHT.test(d.reason));
    assert.ok(baseline.length > 0, "the baseline had no f32 weight GEMM: the test checks nothing");

    const compiled = compileGraph(g, { fuse: true, target: target("cuda") });
    const refused = compiled.gemms.filter((d) => !d.library && F32_WEIGHT.test(d.reason));
    assert.equal(refused.length, 0, `still rounded on load: ${refused.map((d) => d.kernel).join(", ")}`);

    const low = precision === "fp16" ? "f16" : "bf16";
    const plan = compiled.plan;
    const launches = plan.steps.flatMap((s) => (s.op === "launch" ? [s.kernel] : []));
    const at = (id: number, access: string) =>
      launches.flatMap((k, i) =>
        plan.kernels[k].bindings.some((x) => x.buffer === id && x.access === access) ? [i] : []
      );
    // Kept copies: inputs in the low type that GEMM kernels read, one per weight a GEMM rounds.
    const kept = copiedParams(Object.keys(plan.inputs));
    const all = new Set(
      [...lowWeightCopies(g, low)].map((id) => String(g.nodes[g.nodes[id].inputs[0]].attrs.name)),
    );
    for (const name of kept) {
      const b = plan.buffers[plan.inputs[LOW_COPY_PREFIX + name]];
      assert.equal(b.dtype, low, `${b.name} is stored ${b.dtype}`);
      assert.ok(at(b.id, "read").length > 0, `${b.name} is read by no kernel`);
      assert.equal(at(b.id, "write").length, 0, `${b.name} is written during the step's GEMMs`);
    }
    // The optimizer's last pass writes the new copies over the old ones, beside the new weights.
    if (kept.length > 0) {
      const flat = plan.outputs["flat.params"], lowFlat = plan.outputs[LOW_COPY_PREFIX + "flat.params"];
      assert.equal(where(plan, plan.outputs[`new:${LOW_COPY_PREFIX}flat.params`]), where(plan, lowFlat));
      assert.ok(!plan.updates.some((u) => u.param === lowFlat), "the copies are copied back after the step");
      const writers = plan.kernels.filter((k) => k.bindings.some((x) => x.buffer === lowFlat));
      assert.equal(writers.length, 1, `${writers.map((k) => k.name)}`);
      assert.deepEqual(writers[0].bindings.filter((x) => x.buffer === lowFlat).map((x) => x.access), [
        "write",
      ]);
      assert.ok(writers[0].bindings.some((x) => x.buffer === flat && x.access === "read_write"));
    }
    // The others (a copy that cannot start on the binding alignment): a cast kernel of their own, each
    // written before any kernel reads it.
    const casts = lowWeightCopies(compiled.graph, low);
    let copies = 0;
    for (const b of plan.buffers) {
      const node = Number(/^%(\d+) cast$/.exec(b.name)?.[1]);
      if (!casts.has(node)) continue;
      copies++;
      assert.equal(b.dtype, low, `${b.name} is stored ${b.dtype}`);
      const [writer] = at(b.id, "write"), readers = at(b.id, "read");
      assert.ok(
        readers.length > 0 && readers.every((r) => r > writer),
        `${b.name}: written ${writer}, read ${readers}`,
      );
    }
    assert.equal(copies, casts.size, "a weight cast has no buffer of its own");
    assert.equal(kept.length + casts.size, all.size, "a weight neither kept nor cast");
    // Chunk 128 places every f16 copy on the binding alignment; the fixture's 64 only some.
    if (chunk === 128) assert.equal(casts.size, 0);
    else assert.ok(kept.length > 0 && casts.size > 0, `kept ${kept.length}, cast ${casts.size}`);
  });
}

Deno.test("weight copies (fp16 inference): GEMM weights are stored f16, the gathered embedding stays f32", async () => {
  const model = await loadModel("models/bert-tiny.ts");
  const g = buildModelGraph({ model, mode: "infer", precision: "fp16", batchSize: 1, seqLen: 8 });
  const compiled = compileGraph(g, { fuse: true, target: target("cuda") });
  const params = Object.entries(compiled.plan.params).map(([name, id]) =>
    [name, compiled.plan.buffers[id]] as const
  );
  const dtypeOf = (re: RegExp) => params.filter(([n]) => re.test(n)).map(([, b]) => b.dtype);
  assert.ok(dtypeOf(/query\.weight$/).length > 0);
  assert.ok(dtypeOf(/(query|key|value|dense)\.weight$/).every((d) => d === "f16"));
  assert.deepEqual(dtypeOf(/word_embeddings\.weight$/), ["f32"]);
  assert.ok(dtypeOf(/LayerNorm\.weight$|\.bias$/).every((d) => d === "f32"));
  const refused = compiled.gemms.filter((d) => !d.library && F32_WEIGHT.test(d.reason));
  assert.equal(refused.length, 0, `still rounded on load: ${refused.map((d) => d.kernel).join(", ")}`);
  // The values the GEMMs see are unchanged: fused with f16 weights against the original graph.
  const feeds = randomFeeds(g, 3, { input_ids: (r) => r.int(0, 1000), token_type_ids: (r) => r.int(0, 2) });
  // Storing a weight low changes no value a GEMM sees (the upload rounds to nearest even as the cast did):
  // the plan's numbers with and without the weights narrowed are the same, bit for bit. (The runtimes'
  // uploads are checked end to end in tests/nvcc/cuda_emit_cpu.test.ts, BERT-tiny inference fp16.)
  const s = compiled.storage;
  const weights = s.lowWeights;
  assert.ok(weights.size > 0, "no weight stored low");
  const keepWeights = {
    ...s,
    lowWeights: new Set<number>(),
    storedType: (id: number) => (weights.has(id) ? "f32" as const : s.storedType(id)),
  };
  const lowWeights = evaluate(roundTripGraph(compiled.graph, compiled.fusion, s), feeds, {
    precision: "f32",
  });
  const f32Weights = evaluate(roundTripGraph(compiled.graph, compiled.fusion, keepWeights), feeds, {
    precision: "f32",
  });
  assert.ok(f32Weights.size > 0);
  for (const [name, v] of f32Weights) assert.deepEqual(lowWeights.get(name), v, `output ${name} changed`);
});

Deno.test("weight copies: a WGSL-only compile keeps its weights rounded on load (no copy)", async () => {
  const { g } = await trainGraph("fp16");
  const wgsl = compileGraph(g, { fuse: true, target: target("wgsl") });
  assert.deepEqual(copiedParams(Object.keys(wgsl.plan.inputs)), []);
  assert.ok(lowWeightCopies(wgsl.graph, "f16").size > 0, "the WGSL graph lost its weight casts");
  const unstaged = compileGraph(g, {
    fuse: true,
    target: target("wgsl"),
    flags: { ...QUIET, skipPasses: new Set(["weight-copies"]) },
  });
  assert.equal(wgsl.plan.kernels.length, unstaged.plan.kernels.length, "the stage changed a WGSL-only plan");
  // The CUDA plan of the same graph keeps the copies (cuBLASLt reads them).
  const cuda = compileGraph(g, { fuse: true, target: target("cuda") });
  assert.ok(copiedParams(Object.keys(cuda.plan.inputs)).length > 0);
});

Deno.test("weight copies: with the flat vectors cut into groups, each group's copies are updated in place", async () => {
  const one = await copyTrainGraph("fp16", 128);
  const { g, layout } = await copyTrainGraph("fp16", 128, 8, {
    maxGroupBytes: Math.ceil(one.layout.total * 4 / 3),
  });
  assert.ok(layout.groups.length > 1);
  const plan = compileGraph(g, { fuse: true, target: target("cuda") }).plan;
  for (const name of flatNames(layout, "flat.params")) {
    const copies = plan.outputs[LOW_COPY_PREFIX + name];
    assert.ok(copies !== undefined, `no copies vector for ${name}`);
    assert.equal(where(plan, plan.outputs[`new:${LOW_COPY_PREFIX}${name}`]), where(plan, copies), name);
  }
  assert.deepEqual(plan.updates.map((u) => plan.buffers[u.param].name), ["train.state"]);
  assert.equal(
    copiedParams(Object.keys(plan.inputs)).length,
    copiedParams(Object.keys(compileGraph(one.g, { fuse: true, target: target("cuda") }).plan.inputs))
      .length,
  );
});
