/**
 * Column sums as GPU profiles lay them out (lower_kernel.ts columnGroups, column_sums.ts, fusion/siblings.ts
 * mergeSameWriter): graphs whose reductions over leading axes get several threads per column, combined in
 * workgroup memory, and a LayerNorm backward whose dγ and dβ second passes become one kernel. Shared by the
 * CPU-backend, CUDA-shim and WebGPU tests, which run them under a GPU profile against the reference
 * interpreter on fresh random inputs.
 */
import { ModelBuilder } from "../../dsl/builder.ts";
import { layerNorm } from "../../dsl/mod.ts";
import { differentiate } from "../../compiler/passes/autodiff.ts";
import type { Graph } from "../../ir/mod.ts";
import type { Compiled } from "../../compiler/compile.ts";

export interface ColumnSumCase {
  readonly name: string;
  readonly graph: Graph;
  /** What the case is there to exercise, checked on the plan before running it (a message when not). */
  readonly expect: (c: Compiled) => string | undefined;
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
