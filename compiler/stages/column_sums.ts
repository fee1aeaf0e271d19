/** The column-sums stage: large column sums in two passes on a GPU profile (compiler/column_sums.ts). */
import type { Stage } from "../pipeline.ts";
import { splitColumnSums } from "../column_sums.ts";
import type { KernelState } from "./state.ts";

export const columnSumsStage: Stage<KernelState> = {
  name: "column-sums",
  about: "GPU profiles: a column sum over many rows becomes per-part sums, then a sum of the parts",
  run: (s, ctx) => {
    if (!s.options.fuse) return s;
    const r = splitColumnSums(s.graph, s.options.profile?.columnSumParts ?? 1);
    if (r.split === 0) return s;
    if (ctx.flags.level >= 3) console.error(`column-sums: ${r.split} reductions in two passes`);
    return { ...s, graph: r.graph };
  },
  skip: (s) => s,
};
