/**
 * The column-sums stage: on a GPU profile, scatter-adds into small tables as masked column sums
 * (compiler/passes/scatter_column_sums.ts), then large column sums in two passes (compiler/passes/split_column_sums.ts).
 */
import type { Stage } from "../pipeline/stage_runner.ts";
import { splitColumnSums } from "../passes/split_column_sums.ts";
import { scattersAsColumnSums } from "../passes/scatter_column_sums.ts";
import { blockRows } from "../targets/shapes.ts";
import type { KernelState } from "./state.ts";

export const columnSumsStage: Stage<KernelState> = {
  name: "column-sums",
  about:
    "GPU profiles: a scatter-add into few rows becomes a masked column sum; a column sum over many rows becomes per-part sums, then a sum of the parts",
  run: (s, ctx) => {
    if (!s.options.fuse) return s;
    const masked = scattersAsColumnSums(s.graph, s.options.target.scatterMaskedMaxRows);
    const t = s.options.target;
    const r = splitColumnSums(
      masked.graph,
      t.columnSumParts,
      t.columnFillThreads || Infinity,
      (rows, rowLen) => blockRows(t, rows, rowLen),
    );
    if (r.split === 0 && masked.rewritten === 0) return s;
    if (ctx.flags.level >= 3) {
      console.error(
        `column-sums: ${masked.rewritten} scatter-adds as column sums, ${r.split} reductions in two passes`,
      );
    }
    return { ...s, graph: r.graph };
  },
  skip: (s) => s,
};
