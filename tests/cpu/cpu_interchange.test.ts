/**
 * The C emitter's loop interchange (compiler/codegen/c_interchange.ts) and its single-workgroup chunks,
 * on the kernel shapes they change, against the reference interpreter on fresh random inputs: column
 * sums (a bias gradient) with one workgroup (run in chunks) and with several (the last one partial),
 * a softmax over rows longer than a workgroup (block-strided loops), and the embedding gradient's
 * scatter-add (a per-column loop over the whole table). Each case first asserts that its plan has a
 * kernel whose C took the new path, so the check is of that path.
 */
import assert from "node:assert/strict";
import { randomFeeds } from "../../cases/random_feeds.ts";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { ModelBuilder } from "../../dsl/mod.ts";
import { dropout, layerNorm, softmax } from "../../dsl/nn.ts";
import { CPU } from "../../engine/backends.ts";
import type { Graph } from "../../ir/mod.ts";
import { F32_TOL } from "../util/fused_check.ts";
import { checkCpuAgainstReference, testCpu } from "../util/cpu_check.ts";

const cpu = await testCpu();
const SWAPPED = "run outside the thread loop, vectorized across threads";

/** The C of the fused plan's kernels (GEMM epilogues included). */
async function kernelSources(g: Graph): Promise<string[]> {
  const { executor, compiled } = await CPU.compile(cpu.ctx!, g, true);
  executor.destroy();
  return compiled.plan.kernels.flatMap((
    k,
  ) => [k.source!.code, ...(k.library?.epilogue ? [k.library.epilogue.source.code] : [])]);
}

/** A bias gradient's shape: a sum over the two leading axes, fused with an elementwise output. */
function columnSums(rows: number, cols: number): Graph {
  const m = new ModelBuilder(`column-sums-${cols}`);
  const x = m.input("x", "f32", [2, rows, cols]);
  const y = x.mul(m.param("w", [cols], "ones")).tanh();
  m.output("y", y.mul(1.5));
  m.output("s", y.sum([0, 1], false));
  return m.graph;
}

const CASES: {
  name: string;
  /** Whether a kernel of the case must interchange a loop (default true). */
  swapped?: boolean;
  graph: () => Graph;
  expect: RegExp[];
  ints?: Parameters<typeof randomFeeds>[2];
}[] = [
  {
    name: "column sums over 2x37 rows of 200 columns (one workgroup, in chunks)",
    graph: () => columnSums(37, 200),
    expect: [/bf_chunk/],
  },
  {
    name: "column sums over 2x19 rows of 600 columns (several workgroups, the last partial)",
    graph: () => columnSums(19, 600),
    expect: [],
  },
  {
    name: "dropout's column sum (the mask drawn per element in a loop vectorized across threads)",
    graph: () => {
      const m = new ModelBuilder("dropout-column-sums");
      const x = m.input("x", "f32", [2, 33, 160]);
      const y = dropout(x.add(m.param("b", [160], "zeros")), 0.1, m.input("rng_key", "u32", [2]));
      m.output("y", y);
      m.output("s", y.sum([0, 1], false));
      return m.graph;
    },
    expect: [/bf_philox\(/],
    ints: { rng_key: (r) => r.u32() },
  },
  {
    name: "dropout, residual and LayerNorm (a Philox block per four elements; lane-by-lane stores as SIMD)",
    graph: () => {
      const m = new ModelBuilder("dropout-layernorm");
      const x = m.input("x", "f32", [4, 70, 64]);
      const y = dropout(x.add(m.param("b", [64], "zeros")), 0.1, m.input("rng_key", "u32", [2]));
      const ln = layerNorm(
        y.add(m.input("r", "f32", [4, 70, 64])),
        m.param("g", [64], "ones"),
        m.param("beta", [64], "zeros"),
        1e-5,
      );
      m.output("loss", ln.mul(m.input("c", "f32", [4, 70, 64])).sum([0, 1, 2], false));
      return differentiate(m.graph, "loss");
    },
    swapped: false,
    expect: [/const bf_float4 vbf_block\d+ = bf_philox4/],
    ints: { rng_key: (r) => r.u32() },
  },
  {
    name: "a loop-invariant exp of a step counter (an optimizer's bias correction) hoisted out of the loops",
    graph: () => {
      const m = new ModelBuilder("invariant-exp");
      const w = m.input("w", "f32", [300, 64]);
      const step = m.input("step", "f32", [1]);
      const y = w.mul(step.mul(-0.1).exp().neg().add(1).reciprocal());
      m.output("y", y);
      m.output("n", y.square().sum(-1, false));
      return m.graph;
    },
    swapped: false,
    // The exp comes before the (only) thread loop, so it is computed once per workgroup.
    expect: [/= expf\([\s\S]*for \(int lid/],
  },
  {
    name: "a row sum and an elementwise output not needing it: one loop over the row (merged)",
    graph: () => {
      const m = new ModelBuilder("merged-loops");
      const y = m.input("x", "f32", [300, 96]).mul(m.param("w", [96], "ones")).tanh();
      m.output("y", y);
      m.output("n", y.square().sum(-1, false));
      return m.graph;
    },
    swapped: false,
    // The fused kernel's thread walks its row once: one loop, its sum and its stores in one body.
    expect: [
      /^(?![\s\S]*for \(int \w+ = 0; \w+ < 96;[\s\S]*for \(int \w+ = 0; \w+ < 96;)[\s\S]*for \(int \w+ = 0; \w+ < 96;/,
    ],
  },
  {
    name: "softmax over rows of 5000 (longer than a workgroup: block-strided loops)",
    graph: () => {
      const m = new ModelBuilder("long-softmax");
      const x = m.input("x", "f32", [3, 5000]);
      m.output("p", softmax(x.mul(4), -1));
      return m.graph;
    },
    expect: [/bf_base\d+ \+ lid/],
  },
  {
    name: "embedding gradient: scatter-add into a 1000x48 table",
    graph: () => {
      const m = new ModelBuilder("embedding-gradient");
      const table = m.param("table", [1000, 48], "zeros");
      const ids = m.input("ids", "i32", [2, 50]);
      const c = m.input("c", "f32", [2, 50, 48]);
      m.output("loss", table.gather(ids).tanh().mul(c).sum([0, 1, 2], false));
      return differentiate(m.graph, "loss");
    },
    expect: [],
    ints: { ids: (r) => r.int(0, 1000) },
  },
];

for (const c of CASES) {
  Deno.test({
    name: `cpu interchanged loops vs reference: ${c.name}`,
    ignore: !cpu.ctx,
    fn: async () => {
      const g = c.graph();
      const sources = await kernelSources(g);
      const swapped = sources.filter((s) => s.includes(SWAPPED));
      if (c.swapped !== false) assert.ok(swapped.length > 0, `no kernel of ${g.name} interchanged a loop`);
      const pool = c.swapped === false ? sources : swapped;
      for (const re of c.expect) assert.ok(pool.some((s) => re.test(s)), `no kernel matches ${re}`);
      for (const seed of [1, 2]) {
        const feeds = randomFeeds(g, 7100 + seed + CASES.indexOf(c) * 10, c.ints);
        await checkCpuAgainstReference(cpu.ctx!, g, feeds, { fuse: true, tol: F32_TOL });
      }
    },
  });
}

Deno.test({
  name: "cpu interchange: generated C is the same on every compile",
  ignore: !cpu.ctx,
  fn: async () => {
    for (const c of CASES) assert.deepEqual(await kernelSources(c.graph()), await kernelSources(c.graph()));
  },
});
