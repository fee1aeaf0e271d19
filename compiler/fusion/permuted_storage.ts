/**
 * Attention's layouts, chosen for the GEMMs that read them. BERT's attention reads the [B·S, H·D] outputs
 * of the Q, K and V projections as [B, H, S, D] heads (a reshape and a permute), and the output projection
 * reads the [B, H, S, D] result of P·V as [B·S, H·D] (a permute and a reshape); the backward pass does the
 * same with the gradients. Folded into the readers' loads, as fusion leaves them, these views are
 * free for the template GEMM but no strided-batched library call can describe them: the heads' batch
 * axes [B, H] have strides [S·H·D, D], and the permuted result does not merge into [B·S, H·D] at all
 * (compiler/lower/gemm_library.ts).
 *
 * So a value that GEMMs read only through one such view is stored in the view's layout instead: the
 * kernel that computes it writes the view (lower/root_index.ts stores each element where the view puts
 * it) and the readers read a plain contiguous tensor. The heads of Q, K and V are then stored heads-major
 * by the projections' epilogues, and the attention results (the context, dQ, dK, dV) token-major by the
 * GEMMs that make them, with no kernel added for the template (the store moves, the bytes do not). With
 * a library GEMM, a result stored through a view is written by the call itself where its strides allow
 * (batch 1; or in groups, see gemm_library.ts), else by the epilogue kernel from the f32 product.
 *
 * Why not a copy kernel: it would read and write every such value once more. Why not only an outer loop
 * of library calls over B: the context and the gradients would still need the permuted store, and at
 * batch 64 a loop launches 64 calls per attention GEMM on a GPU (docs/compiler.md).
 *
 * Conditions, per root R of a matmul or attention kernel: R is not a graph output or part of a flat
 * vector; its only reader is a chain of reshapes, permutes and casts (computed where read, containing a
 * permute; with fp16 storage the rounding cast comes along and V is stored f16) ending in a view V that some matmul kernel reads as its GEMM's operand (directly or through
 * a cast). Then R's kernel takes the chain and writes V instead of R; V's other readers (the bias
 * gradient's row sums) read it contiguous instead of through the view.
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
