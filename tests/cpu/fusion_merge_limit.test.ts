/**
 * The binding cap of sibling and consumer merges is WGSL's: a plan emitted only as CUDA (or C) merges past
 * it (compiler/stages/fusion.ts mergeBindingLimit). The case it is for: LAMB's first pass, which reads
 * the flat weight vector for the update, also takes in the weight norm's reduction over the same vector,
 * so the weights are read twice per step (there and in the final apply), not three times. Merges that
 * share only a small tensor keep to the cap, so the moments' "keep or update" selects still fold into
 * the kernel that computes the moments, and no kernel re-reads the new moments.
 */
import assert from "node:assert/strict";
import { target } from "../util/target.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { readsOf } from "../../compiler/fusion/kernel_facts.ts";
import { buildModelGraph } from "../../optimizer/model_graph.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import tiny from "../../models/bert-tiny.ts";

const graph = () =>
  buildModelGraph({
    model: tiny,
    mode: "train",
    precision: "fp16",
    batchSize: 2,
    seqLen: 16,
    maxPredictions: 3,
  });

/** Per flat vector the optimizer reads (weights, moments), how many kernels read it. */
function readersOfFlatVectors(wgsl: boolean) {
  const c = compileGraph(graph(), {
    fuse: true,
    target: target(wgsl ? "wgsl" : "cuda", PROFILES["cuda-sm90"]),
    flags: { level: 0, skipPasses: new Set() },
  });
  const g = c.graph, f = c.fusion;
  const weights = new Set(
    [...f.inPlace.placed].filter(([part]) => g.nodes[part].op === "param").map(([, w]) => w.concat),
  );
  const moments = g.nodes.filter((n) => n.op === "input" && /^opt\.[mv]$/.test(String(n.attrs.name)))
    .map((n) => n.id);
  assert.equal(weights.size, 1, "one flat weight vector");
  assert.equal(moments.length, 2, "the moments m and v");
  const count = (id: number) => f.kernels.filter((k) => readsOf(g, f, k).has(id)).length;
  return { weights: count([...weights][0]), m: count(moments[0]), v: count(moments[1]) };
}

Deno.test("merge limit: a CUDA-only plan reads the weights in two LAMB passes, a WGSL plan in three", () => {
  const cuda = readersOfFlatVectors(false), wgsl = readersOfFlatVectors(true);
  assert.equal(cuda.weights, 2, `CUDA-only: ${JSON.stringify(cuda)}`);
  assert.equal(wgsl.weights, 3, `with WGSL: ${JSON.stringify(wgsl)}`);
  // The moments are read once, by the kernel that computes the new ones, in both.
  assert.deepEqual([cuda.m, cuda.v, wgsl.m, wgsl.v], [1, 1, 1, 1]);
});
