/**
 * Column sums a library GEMM will compute: on plans whose GEMMs are cuBLASLt calls, the bias gradient
 * db = Σ_tokens dY of a linear layer is taken over by the dW GEMM's BGRAD epilogue
 * (compiler/lower/gemm_bgrad.ts), which sums the dY operand it reads anyway. Which sums qualify is decided on
 * the graph (passes/gemm_calls.ts `bgradSums`); their kernels then stay in the plan only as the call's
 * fallback, and producer fusion leaves them out of dY's kernel so that dY roots a kernel of its own (why, and
 * the test: DESIGN.md, notes: compiler/fusion/library_sums.ts).
 */
import type { Graph, NodeId } from "../../ir/mod.ts";
import { keepsElements } from "../passes/gemm_sum_order.ts";
import type { FusedKernel } from "./types.ts";

/**
 * Whether kernel `k` computes nothing but one of `sums` and the reshapes and widening casts on its way in or
 * out. With `x` (producer fusion, asking of a kernel reading x): a sum of x, and the kernel's one root itself.
 */
export function isLibraryColumnSum(
  g: Graph,
  k: FusedKernel,
  sums: ReadonlyMap<NodeId, ReadonlySet<NodeId>>,
  x?: NodeId,
): boolean {
  if (k.kind !== "reduce") return false;
  const own = [...k.members].filter((m) => !keepsElements(g, m));
  const of = own.length === 1 ? sums.get(own[0]) : undefined;
  return of !== undefined &&
    (x === undefined || (of.has(x) && k.roots.length === 1 && k.roots[0] === own[0]));
}
