/**
 * Graph outputs that are views of a piece of an in-place flat vector (issue 16). A training step returns
 * each gradient twice: as its piece of the flat gradient vector the optimizer reads (an in-place concat,
 * compiler/fusion/in_place.ts, placed at its offset) and as the graph output `grad.<name>`. Where the
 * output is the placed tensor itself it already lives inside the vector; where it is a reshape of it (a
 * bias gradient [1, 1, c] placed, returned [c]; a LayerNorm γ gradient) fusion made the reshape a root of
 * its own, written to a buffer of its own: the kernel writes the same values twice, and a cuBLASLt call
 * that takes the column sum over (compiler/lower/gemm_bgrad.ts) can write only one of them, so the CUDA
 * runtime copied the vector after every such call (a launch each, 145 per bert-large step).
 *
 * A reshape keeps the row-major element order, so such an output's bytes are exactly its placed tensor's.
 * Here it becomes a view: no kernel writes it, and its buffer (still named and shaped as the output) sits
 * at the placed tensor's offset in the flat vector (memory.ts). Sound because:
 * - the flat vector is pinned (never shares its slot), so the range holds the value until the step's
 *   outputs are read, as it already does for the gradients returned unreshaped;
 * - the placed tensor is a kernel root (not a parameter or input, whose ranges a step's in-place updates
 *   overwrite: in_place_updates.ts), written once, so the range changes no more after its kernel;
 * - no kernel reads the output (an in-place concat it is an operand of, directly or through reshapes,
 *   holds the placed tensor), so none has to find it written earlier than the placed tensor is;
 * - both buffers hold one stored dtype;
 * - the kernel that wrote the output writes something else too (the placed tensor, where it is the same
 *   kernel): kernels are not removed here, which would renumber them.
 * Every target runs the same plan, so the CPU and WebGPU backends read the same view.
 */
import type { DType, Graph, NodeId } from "../../ir/mod.ts";
import type { FusedKernel, FusionResult } from "../fusion/types.ts";
import { usersOf } from "../graph/users.ts";

export interface OutputViews {
  /** The fusion with the views taken out of the kernels that wrote them. */
  readonly fusion: FusionResult;
  /** Output node -> the placed node whose range of the flat vector it views. */
  readonly views: ReadonlyMap<NodeId, NodeId>;
}

/** The outputs that can be views (see the file comment), and the fusion that no longer writes them. */
export function outputViews(
  g: Graph,
  f: FusionResult,
  storedType: (id: NodeId) => DType,
): OutputViews {
  const users = usersOf(g);
  const kernels: FusedKernel[] = [...f.kernels];
  const kernelOf = new Int32Array(f.kernelOf);
  const views = new Map<NodeId, NodeId>();
  const isRoot = (id: NodeId) => kernelOf[id] >= 0 && kernels[kernelOf[id]].roots.includes(id);
  // Read by some kernel: not only by in-place concats, directly or through reshapes computed nowhere.
  const readByKernel = (id: NodeId): boolean =>
    users[id].some((u) =>
      !f.inPlace.concats.has(u) &&
      (g.nodes[u].op !== "reshape" || f.kernelOf[u] >= 0 || f.materialized.has(u) || readByKernel(u))
    );
  for (const o of new Set(g.outputs.values())) {
    if (g.nodes[o].op !== "reshape" || f.inPlace.placed.has(o) || f.inPlace.concats.has(o)) continue;
    const chain: NodeId[] = [];
    let p = o;
    while (g.nodes[p].op === "reshape") (chain.push(p), p = g.nodes[p].inputs[0]);
    if (!f.inPlace.placed.has(p) || !isRoot(p) || !isRoot(o)) continue;
    if (storedType(o) !== storedType(p)) continue;
    if (readByKernel(o)) continue;
    const k = kernelOf[o];
    if (kernels[k].roots.length < 2) continue;
    // Out of the kernel: the output and the reshapes leading to it that only the chain reads.
    const gone = new Set<NodeId>([o]);
    for (const c of chain.slice(1)) {
      if (kernelOf[c] !== k || isRoot(c) || !users[c].every((u) => gone.has(u))) break;
      gone.add(c);
    }
    const kernel = kernels[k];
    kernels[k] = {
      ...kernel,
      roots: kernel.roots.filter((r) => r !== o),
      members: new Set([...kernel.members].filter((m) => !gone.has(m))),
    };
    for (const c of gone) kernelOf[c] = -1;
    views.set(o, p);
  }
  // The views stay materialized: they live in buffers (inside the flat vector), written by no kernel.
  return { fusion: views.size ? { ...f, kernels, kernelOf } : f, views };
}
