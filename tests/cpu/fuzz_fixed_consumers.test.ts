/**
 * Regressions of compiler bugs the fuzzer found in consumer merging (compiler/fusion/consumers.ts), in
 * their smallest forms, fused on the CPU backend against the reference interpreter.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { ModelBuilder, type Tensor } from "../../dsl/mod.ts";
import type { Graph, NodeId } from "../../ir/mod.ts";
import { fuzzGraph } from "../../cases/fuzz/generate.ts";
import { F32_TOL } from "../util/fused_check.ts";
import { checkCpuAgainstReference, testCpu } from "../util/cpu_check.ts";

const cpu = await testCpu();

/** Fuzz seed 500213: a consumer read its producer's value through a permute, at the producer's index. */
function permutedConsumer() {
  const m = new ModelBuilder("permuted-consumer");
  const y = m.param("y", [2, 8, 4], "zeros");
  const x = m.param("x", [2, 8, 4], "zeros");
  const c = y.sub(y.mean(2));
  const mix = (c: Tensor, v: Tensor, perm: number[]) =>
    c.permute(perm).mul(v.permute(perm).tanh()).permute(perm).add(c.mul(0.5));
  const a = mix(c, x, [2, 1, 0]);
  const out = mix(c, a, [1, 0, 2]);
  m.output("loss", out.mul(m.input("cot", "f32", [2, 8, 4])).mean([0, 1, 2], false));
  return differentiate(m.graph, "loss");
}

Deno.test({
  name: "fusion-consumers: no merge that reads the producer's value at a permuted index (seed 500213)",
  ignore: !cpu.ctx,
  fn: async () => {
    const g = permutedConsumer();
    await checkCpuAgainstReference(cpu.ctx!, g, randomFeeds(g, 500213), { fuse: true, tol: F32_TOL });
  },
});

Deno.test("fusion-consumers: the permuted consumer is refused with a reason", () => {
  const { fusion } = compileGraph(permutedConsumer(), { fuse: true, target: target("wgsl") });
  assert.ok(
    fusion.decisions.some((d) =>
      !d.ok &&
      /^it iterates \[8, 2, 4\], its producer \[2, 8, 4\], and it reads %\d+ at an index/.test(d.reason)
    ),
  );
});

Deno.test("fusion-consumers: a hoisted root's inputs read through a view are counted (seeds 115, 117, 449, 898, 981)", () => {
  // A small root moved into the kernel of one of its operands while another operand, a reshape of a later
  // kernel's root, was taken for an inline value: the stage's check found a read before the write.
  for (const seed of [115, 117, 449, 898, 981]) {
    compileGraph(fuzzGraph(seed).graph, { fuse: true, target: target("wgsl") });
  }
});

/**
 * The kernel members that read `anchor`, a value the kernel computes, at another element than their own:
 * through anything but reshapes and casts (which keep the linear index) between them and it.
 */
function readsAtAnotherIndex(g: Graph, members: ReadonlySet<NodeId>, anchor: NodeId): NodeId[] {
  const reaches = (x: NodeId, direct: boolean): boolean => {
    if (x === anchor) return !direct;
    if (members.has(x)) return false;
    const n = g.nodes[x];
    const keeps = n.op === "reshape" || n.op === "cast";
    return n.inputs.some((i) => reaches(i, direct && keeps));
  };
  return [...members].filter((m) => m !== anchor && g.nodes[m].inputs.some((i) => reaches(i, true)));
}

Deno.test("fusion-consumers: no small root hoisted into a GEMM that reads its result through a permute (seed 165904013)", () => {
  // A 48-element root (x·x of a head-merging permute of attention's PV product) moved into the PV GEMM's
  // epilogue, which computes it at the GEMM's own element: wrong values with template GEMMs.
  const { graph, fusion } = compileGraph(fuzzGraph(165904013).graph, { fuse: true, target: target("wgsl") });
  for (const k of fusion.kernels) {
    if (k.kind !== "matmul" || k.anchor === undefined) continue;
    assert.deepEqual(readsAtAnotherIndex(graph, k.members, k.anchor), [], `kernel ${k.id}`);
  }
});
