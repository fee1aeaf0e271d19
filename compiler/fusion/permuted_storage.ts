/**
 * Attention's layouts, chosen for the GEMMs that read them: a value that GEMMs read only through one
 * permuting view (the Q, K, V heads [B, H, S, D] of [B·S, H·D] projections; P·V's result read token-major)
 * is stored in the view's layout by the kernel that computes it, so the readers read a plain contiguous
 * tensor that a strided-batched library call can describe. The store moves, the bytes do not (why not a
 * copy kernel, and the conditions: DESIGN.md, notes: compiler/fusion/permuted_storage.ts).
 */
import type { Graph, NodeId } from "../../ir/mod.ts";
import type { FusedKernel, FusionResult } from "./types.ts";
import { usersOf } from "../graph/users.ts";

/** The view chain from root `r` that GEMMs read, or undefined when `r` keeps its layout. */
function gemmView(g: Graph, f: FusionResult, users: NodeId[][], r: NodeId): NodeId[] | undefined {
  const chain: NodeId[] = [];
  let v = r;
  while (users[v].length === 1) {
    const u = users[v][0];
    const op = g.nodes[u].op;
    const view = op === "reshape" || op === "permute" || op === "cast";
    // A view is computed where read: inline (several readers), or inside the one GEMM kernel reading it.
    const k = f.kernelOf[u];
    const inReader = k >= 0 && k !== f.kernelOf[r] && f.kernels[k].kind === "matmul";
    if (!view || (k >= 0 && !inReader) || f.materialized.has(u)) break;
    chain.push(u);
    v = u;
  }
  if (!chain.some((c) => g.nodes[c].op === "permute")) return undefined;
  // A GEMM's operand, read directly or through casts (in its kernel, or computed where read).
  const readsAsOperand = (u: NodeId): boolean => {
    const k = f.kernelOf[u];
    if (k < 0) return g.nodes[u].op === "cast" && !f.materialized.has(u) && users[u].some(readsAsOperand);
    if (f.kernels[k].kind !== "matmul") return false;
    return u === f.kernels[k].anchor || g.nodes[u].op === "cast";
  };
  return users[v].some(readsAsOperand) ? chain : undefined;
}

/**
 * Stores values that GEMMs read through a permuting view in that view's layout (see the file comment).
 * Returns `f` itself when nothing changes.
 */
export function layoutForGemms(
  g: Graph,
  f: FusionResult,
  opts: { takeFuel?: () => boolean; log?: (msg: string) => void } = {},
): FusionResult {
  const users = usersOf(g);
  const outputs = new Set(g.outputs.values());
  const kernels: FusedKernel[] = [...f.kernels];
  const kernelOf = new Int32Array(f.kernelOf);
  const materialized = new Set(f.materialized);
  let changed = false;
  kernels.forEach((k, i) => {
    if (k.kind !== "matmul" && k.kind !== "attention") return;
    let roots = k.roots;
    let members = k.members;
    for (const r of k.roots) {
      if (outputs.has(r) || f.inPlace.placed.has(r) || f.inPlace.concats.has(r)) continue;
      const chain = gemmView(g, f, users, r);
      if (!chain) continue;
      if (opts.takeFuel && !opts.takeFuel()) continue;
      const v = chain[chain.length - 1];
      opts.log?.(
        `fusion: %${r} stored as its view %${v} [${g.nodes[v].type.shape}] for the GEMMs reading it`,
      );
      members = new Set([...members, ...chain]);
      roots = [...roots.filter((x) => x !== r), v].sort((a, b) => a - b);
      for (const c of chain) {
        // Out of the reading kernel, if it computed the view on load.
        const reader = kernelOf[c];
        if (reader >= 0 && reader !== i) {
          const rk = kernels[reader];
          kernels[reader] = { ...rk, members: new Set([...rk.members].filter((x) => x !== c)) };
        }
        kernelOf[c] = i;
      }
      materialized.delete(r);
      materialized.add(v);
    }
    if (roots !== k.roots) {
      kernels[i] = { ...k, roots, members };
      changed = true;
    }
  });
  return changed ? { ...f, kernels, kernelOf, materialized } : f;
}
