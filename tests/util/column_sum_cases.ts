/**
 * Column sums as GPU profiles lay them out (lower_kernel.ts columnGroups, column_sums.ts, fusion/siblings.ts
 * mergeSameWriter): graphs whose reductions over leading axes get several threads per column, combined in
 * workgroup memory, and a LayerNorm backward whose dγ and dβ second passes become one kernel. Shared by the
 * CPU-backend, CUDA-shim and WebGPU tests, which run them under a GPU profile against the reference
 * interpreter on fresh random inputs.
 */
import { ModelBuilder } from "../../dsl/builder.ts";
import { dropout, layerNorm } from "../../dsl/mod.ts";
import { blockPartials } from "../../compiler/fusion/kernel_facts.ts";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import type { Graph } from "../../ir/mod.ts";
import type { Compiled } from "../../compiler/driver/compile.ts";
import type { TargetProfile } from "../../compiler/targets/profiles.ts";

export interface ColumnSumCase {
  readonly name: string;
  readonly graph: Graph;
  /** What the case is there to exercise, checked on the plan before running it (a message when not). */
  readonly expect: (c: Compiled) => string | undefined;
  /**
   * The threads that fill the device, where the case sets it lower than the profile's (so that a graph
   * small enough for the CUDA shim gets the layout a GPU gives a larger one).
   */
  readonly fillThreads?: number;
}

/** The profile a case compiles under: the runner's GPU profile with the case's fill, if it sets one. */
export function caseProfile(c: ColumnSumCase, base: TargetProfile): TargetProfile {
  return c.fillThreads ? { ...base, columnFillThreads: c.fillThreads } : base;
}

/** Reduce kernels whose loop over the reduced elements is shared by groups of threads (`grp`). */
const splitKernels = (c: Compiled) =>
  c.kernels.filter((k) => k.kind === "reduce" && k.shared.some((s) => s.name === "colred"));

/** LayerNorm over [tokens, width] and its backward (a probe loss): dγ, dβ are column sums over tokens. */
function layerNormBackward(tokens: number, width: number): Graph {
  const m = new ModelBuilder(`layernorm backward over ${tokens} tokens`);
  const x = m.param("x", [tokens, width], "zeros", "f32");
  const y = layerNorm(x, m.param("g", [width], "ones", "f32"), m.param("b", [width], "zeros", "f32"), 1e-5);
  m.output("out", y);
  const probe = m.input("probe", "f32", [tokens, width]);
  m.output("loss", y.mul(probe).sum([0, 1], false));
  return differentiate(m.graph, "loss");
}

/**
 * BERT's residual LayerNorm, y = LN(dropout(a) + r), read twice by the loss so that dY sums two terms, and
 * its backward: dγ and dβ's first pass joins the row kernel (fusion/row_blocks.ts). At 1,024 tokens of 512
 * and 65,536 threads to fill the device: 4 rows a workgroup (256 workgroups of 256 threads), each thread
 * owning 2 columns.
 */
function residualLayerNorm(tokens: number, width: number): Graph {
  const m = new ModelBuilder(`residual LayerNorm backward over ${tokens}x${width}`);
  const a = m.param("a", [tokens, width], "zeros", "f32");
  const r = m.param("r", [tokens, width], "zeros", "f32");
  const key = m.input("rng_key", "u32", [2]);
  const g = m.param("g", [width], "ones", "f32");
  const y = layerNorm(dropout(a, 0.1, key).add(r), g, m.param("b", [width], "zeros", "f32"), 1e-12);
  const p1 = m.input("p1", "f32", [tokens, width]);
  const p2 = m.input("p2", "f32", [tokens, width]);
  m.output("loss", y.mul(p1).add(y.mul(y).mul(p2)).sum([0, 1], false));
  return differentiate(m.graph, "loss");
}

/** Two LayerNorms side by side and their backward: four column sums, two of each LayerNorm's parts. */
function twoLayerNorms(tokens: number, width: number): Graph {
  const m = new ModelBuilder(`two LayerNorm backwards over ${tokens}x${width}`);
  let loss;
  for (const name of ["first", "second"]) {
    const x = m.param(`${name}.x`, [tokens, width], "zeros", "f32");
    const g = m.param(`${name}.g`, [width], "ones", "f32");
    const y = layerNorm(x, g, m.param(`${name}.b`, [width], "zeros", "f32"), 1e-5);
    const term = y.mul(m.input(`${name}.probe`, "f32", [tokens, width])).sum([0, 1], false);
    loss = loss ? loss.add(term) : term;
  }
  m.output("loss", loss!);
  return differentiate(m.graph, "loss");
}

/** A column sum, a column maximum and a two-stage column statistic (mean, then centred variance). */
function columnStatistics(rows: number, cols: number): Graph {
  const m = new ModelBuilder(`column statistics of ${rows}x${cols}`);
  const x = m.input("x", "f32", [rows, cols]);
  const centred = x.sub(x.mean(0));
  m.output("y", centred.mul(centred.square().mean(0).add(1e-5).rsqrt()));
  m.output("colmax", x.max(0));
  return m.graph;
}

/** A bias gradient over [batch, seq, width] with an elementwise producer (two passes on a GPU). */
function biasGradient(batch: number, seq: number, width: number): Graph {
  const m = new ModelBuilder(`bias gradient over ${batch}x${seq} tokens`);
  const dy = m.input("dy", "f32", [batch, seq, width]);
  m.output("db", dy.mul(dy).add(dy).sum([0, 1]));
  return m.graph;
}

export function columnSumCases(): ColumnSumCase[] {
  return [
    {
      name: "LayerNorm backward over 2048 tokens: dγ and dβ in two passes, the second passes one kernel",
      graph: layerNormBackward(2048, 96),
      expect: (c) => {
        // The second passes: the sums over the parts (axis 0 of [parts, 1, width]), both in one kernel.
        const second = splitKernels(c).filter((k) =>
          /over \[\d+,1,\d+\] reducing axes \[0\]$/.test(k.about[0])
        );
        const sums = second.map((k) => k.about.filter((a) => /^%\d+ reduce_sum/.test(a)).length);
        return sums.includes(2) ? undefined : `no second pass sums both dγ and dβ: ${sums}`;
      },
    },
    {
      name:
        "residual LayerNorm backward over 1024x512: dγ, dβ's first pass in the row kernel, 4 rows a workgroup",
      graph: residualLayerNorm(1024, 512),
      fillThreads: 65536,
      expect: (c) => {
        const blocked = c.fusion.kernels.filter((k) => k.rowBlock === 4);
        const sums = blocked.map((k) => blockPartials(c.graph, k).length);
        return sums.includes(2) ? undefined : `no row kernel sums dγ and dβ's parts: ${sums}`;
      },
    },
    {
      name: "two LayerNorm backwards over 1024x32: their four second passes in one kernel",
      graph: twoLayerNorms(1024, 32),
      expect: (c) => {
        const second = c.fusion.kernels.filter((k) => k.kind === "reduce" && k.axes?.join() === "0");
        const sums = second.map((k) => k.roots.length);
        return sums.includes(4) ? undefined : `no kernel sums both LayerNorms' parts: ${sums}`;
      },
    },
    {
      name: "bias gradient over 16x128 tokens: the parts summed by 64 threads a column",
      graph: biasGradient(16, 128, 96),
      expect: (c) => {
        const grid = splitKernels(c).map((k) => k.workgroups * k.workgroupSize);
        // 96 columns × 128 parts: 64 threads a column (each adds two parts) = 6,144 threads.
        return grid.includes(96 * 64) ? undefined : `no second pass of 64 threads a column: ${grid}`;
      },
    },
    {
      name: "column statistics of 700x40: a column to a workgroup, sum and max combined in it",
      graph: columnStatistics(700, 40),
      expect: (c) => {
        const wg = splitKernels(c).map((k) => k.workgroups);
        return wg.includes(40) ? undefined : `no kernel with a workgroup per column: ${wg}`;
      },
    },
    {
      name: "column sum over 48 rows of 200: short columns shared by 16 threads",
      graph: (() => {
        const m = new ModelBuilder("short column sum");
        m.output("s", m.input("x", "f32", [48, 200]).sum(0));
        return m.graph;
      })(),
      expect: (c) => (splitKernels(c).length === 1 ? undefined : "the short column sum is not split"),
    },
  ];
}
