/**
 * Kernel names say what a kernel fuses (`k017_matmul_bias_gelu`, `k018_layernorm_residual`), read off the
 * ops it contains, so a directory listing of kernels_generated/ reads like the model.
 */
import type { Graph, NodeId } from "../../ir/mod.ts";
import type { FusedKernel } from "../fusion/types.ts";

/** Tags in the order they appear in names; each is present when its test holds for the kernel's ops. */
const TAGS: readonly { tag: string; test: (ops: ReadonlyMap<string, number>, k: FusedKernel) => boolean }[] =
  [
    // An attention kernel is named for what it computes, not for its GEMMs, softmax and permutes.
    { tag: "attention", test: (_o, k) => k.kind === "attention" },
    { tag: "gather", test: (o) => o.has("gather") },
    { tag: "scatter_add", test: (o) => o.has("scatter_add") },
    { tag: "matmul", test: (o, k) => o.has("matmul") && k.kind !== "attention" },
    {
      tag: "softmax",
      test: (o, k) => o.has("reduce_max") && o.has("exp") && !o.has("log") && k.kind !== "attention",
    },
    { tag: "logsumexp", test: (o) => o.has("reduce_max") && o.has("exp") && o.has("log") },
    { tag: "layernorm", test: (o) => o.has("rsqrt") && o.has("reduce_sum") },
    { tag: "rsqrt", test: (o) => o.has("rsqrt") && !o.has("reduce_sum") },
    { tag: "gelu", test: (o) => o.has("erf") || (o.has("tanh") && (o.get("mul") ?? 0) >= 4) },
    { tag: "tanh", test: (o) => o.has("tanh") && (o.get("mul") ?? 0) < 4 },
    { tag: "dropout", test: (o) => o.has("random_uniform") },
    { tag: "argmax", test: (o) => o.has("reduce_max") && !o.has("exp") && (o.has("eq") || o.has("ge")) },
    { tag: "max", test: (o) => o.has("reduce_max") && !o.has("exp") && !o.has("eq") && !o.has("ge") },
    { tag: "colsum", test: (o, k) => o.has("reduce_sum") && k.axes !== undefined && k.axes[0] === 0 },
    {
      tag: "rowsum",
      test: (o, k) =>
        o.has("reduce_sum") && k.axes !== undefined && k.axes[0] !== 0 && k.kind !== "attention",
    },
    { tag: "pad", test: (o) => o.has("pad") },
    { tag: "permute", test: (o, k) => o.has("permute") && k.kind !== "attention" },
    { tag: "eltwise", test: () => true },
  ];

function opCounts(g: Graph, k: FusedKernel): Map<string, number> {
  const ops = new Map<string, number>();
  for (const m of k.members) ops.set(g.nodes[m].op, (ops.get(g.nodes[m].op) ?? 0) + 1);
  // Sources read inside the kernel (random draws) count as fused too.
  for (const m of k.members) {
    for (const i of g.nodes[m].inputs) {
      if (g.nodes[i].op === "random_uniform") ops.set("random_uniform", 1);
    }
  }
  return ops;
}

export function kernelName(g: Graph, k: FusedKernel): string {
  const ops = opCounts(g, k);
  const tags: string[] = [];
  for (const t of TAGS) {
    if (t.tag === "eltwise" && tags.length) break;
    if (t.test(ops, k)) tags.push(t.tag);
    if (tags.length === 3) break;
  }
  return `k${String(k.id).padStart(3, "0")}_${tags.join("_")}`;
}

/** One line per member: `%id op [shape] (model line)`, in graph order. */
export function describeKernel(g: Graph, k: FusedKernel): string[] {
  const lines = [`${k.kind} kernel over [${k.space.join(",")}]${k.axes ? ` reducing axes [${k.axes}]` : ""}`];
  const members = [...k.members].sort((a: NodeId, b: NodeId) => a - b);
  for (const m of members) {
    const n = g.nodes[m];
    const root = k.roots.includes(m) ? " -> written" : "";
    lines.push(
      `%${m} ${n.op} ${n.type.dtype}[${n.type.shape.join(",")}]${n.loc ? ` (${n.loc})` : ""}${root}`,
    );
  }
  return lines;
}
