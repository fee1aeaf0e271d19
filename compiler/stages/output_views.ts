/**
 * Graph outputs that are views of a piece of an in-place flat vector (issue 16): a gradient output
 * `grad.<name>` that is a reshape of its piece of the flat gradient vector gets no kernel of its own; its
 * buffer sits at the piece's offset (a reshape keeps the row-major order), so no kernel writes the values
 * twice and no cuBLASLt BGRAD call needs a copy after it (145 a bert-large step). Why it is sound:
 * DESIGN.md, notes: compiler/stages/output_views.ts.
 */
import type { DType, Graph, NodeId } from "../../ir/mod.ts";
import type { FusedKernel, FusionResult } from "../fusion/types.ts";
import { usersOf } from "../graph/users.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import { type KernelState, need, storedTypeOf } from "./state.ts";

export const outputViewsStage: Stage<KernelState> = {
  name: "output-views",
  about:
    "gradient outputs that are reshapes of their piece of a flat vector get no kernel: they view the piece",
  run: (s) => {
    const { fusion, views } = outputViews(
      s.graph,
      need(s.fusion, "the fusion", "output-views"),
      (id) => storedTypeOf(s, id),
    );
    return { ...s, fusion, views };
  },
};

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
