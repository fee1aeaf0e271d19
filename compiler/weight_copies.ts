/**
 * Low-precision weight copies for library GEMMs. A mixed-precision GEMM reads its weight as
 * `cast(w, f16)` of an f32 parameter. The template GEMM rounds on load, but a library GEMM (cuBLASLt)
 * reads the stored bytes as they are and can only take an f16/bf16 buffer (gemm_library.ts explains why
 * FAST_16F is not used instead). So, where GEMMs run on the library, each such cast is materialized: a
 * kernel of its own writes the rounded weight once per step (4 bytes read, 2 written per element), and
 * every GEMM reading the weight, forward and backward, reads 2 bytes per element instead of 4.
 *
 * One cast kernel per weight rather than one over the whole flat parameter vector: a GEMM reading its
 * weight as a slice of one flat copy bakes the slice's offset into its code, so the same GEMM in every
 * layer would become a different kernel source (24 NVRTC compiles instead of 1 for bert-large); its own
 * buffer is bound at an offset instead. The price is a launch per weight (about 200 per bert-large step).
 *
 * Parameters every use of which is such a rounding (an inference graph's weights) need no copy: the
 * storage policy stores them low (storage_precision.ts `weightsReadOnlyLow`). The graph is unchanged, so
 * the values are the original ones.
 */
import type { DType, Graph, Node, NodeId } from "../ir/mod.ts";
import { usersOf } from "./fusion/needs.ts";
import { VIEW_OPS, weightsReadOnlyLow } from "./storage_precision.ts";

/** Whether `id` is read by a matmul, directly or through views. */
function feedsMatmul(g: Graph, users: readonly NodeId[][], id: NodeId): boolean {
  return users[id].some((u) =>
    g.nodes[u].op === "matmul" || (VIEW_OPS.has(g.nodes[u].op) && feedsMatmul(g, users, u))
  );
}

/** The casts of f32 parameters to `low` that GEMMs read and that fusion must materialize. */
export function lowWeightCopies(g: Graph, low: DType): ReadonlySet<NodeId> {
  if (low === "f32") return new Set();
  const users = usersOf(g);
  const storedLow = new Set(weightsReadOnlyLow(g, low, users));
  const isWeightCast = (n: Node) => {
    if (n.op !== "cast" || n.attrs.to !== low) return false;
    const src = g.nodes[n.inputs[0]];
    return src.op === "param" && src.type.dtype === "f32" && !storedLow.has(src.id) &&
      feedsMatmul(g, users, n.id);
  };
  return new Set(g.nodes.filter(isWeightCast).map((n) => n.id));
}
