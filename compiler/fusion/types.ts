/** What fusion decides: which graph nodes run together in which kernel, and why other pairs do not. */
import type { NodeId } from "../../ir/mod.ts";
import type { InPlaceConcats } from "./in_place.ts";

/**
 * `attention`: QKᵀ, the row softmax (with scale, mask, dropout) and PV in one kernel, one workgroup per
 * tile of query rows (compiler/fusion/attention.ts); its space and axes are the softmax's, its anchor the
 * PV GEMM.
 */
export type FusedKind = "loop" | "reduce" | "matmul" | "scatter" | "attention";

/**
 * How a kernel member is read by its users inside the kernel:
 * - `elem`: at the kernel's element index (identity over the kernel space);
 * - `row:<axes>`: at the row index of a reduction over those axes (the reduced axes are 0);
 * - `any`: through index math that is neither (broadcast from elsewhere, permute, slice, gather…);
 *   such a member is recomputed wherever it is read, so it must not contain a reduction;
 * - `operand`: as a matmul operand, read once per output tile that needs it.
 */
export type Need = string;

export interface FusedKernel {
  readonly id: number;
  kind: FusedKind;
  /** Nodes whose values the kernel writes to buffers (materialized), ascending. */
  readonly roots: NodeId[];
  /** Every node computed inside the kernel, roots included. */
  readonly members: Set<NodeId>;
  /**
   * Iteration space: the roots' shape for loop kernels, the reduced operand's shape for reduce kernels,
   * the scores' shape for attention kernels.
   */
  space: readonly number[];
  /** Reduced axes (reduce kernels; the softmax's axis for attention kernels). */
  axes?: readonly number[];
  /** The matmul or scatter node a matmul/scatter kernel is built around (attention: the PV matmul). */
  anchor?: NodeId;
  /**
   * A row kernel (reduce over trailing axes) that walks this many consecutive rows per workgroup and also
   * sums columns over them: members reducing a [rows / rowBlock, rowBlock, …] view over axis 1 are the
   * per-part sums of a two-pass column sum (compiler/fusion/row_blocks.ts).
   */
  rowBlock?: number;
}

export interface FusionDecision {
  readonly producer: NodeId;
  readonly consumerKernel: number;
  readonly ok: boolean;
  readonly reason: string;
}

export interface FusionResult {
  /** Kernels in a valid execution order. */
  readonly kernels: readonly FusedKernel[];
  /** kernel index per node, -1 for nodes computed in no kernel (buffers, inline sources, views). */
  readonly kernelOf: Int32Array;
  /** Nodes whose values live in buffers: graph inputs/params and every kernel root. */
  readonly materialized: ReadonlySet<NodeId>;
  readonly decisions: readonly FusionDecision[];
  /** Fusions refused by FUSION_FUEL running out. */
  readonly fuelRefusals: number;
  /** Flat vectors assembled in place (in_place.ts): materialized, computed by no kernel. */
  readonly inPlace: InPlaceConcats;
}

/**
 * How a kernel changes when a node joins it, as a join decision describes it (decisions only describe;
 * fuse.ts `applyJoin` applies): a loop kernel becomes a matmul kernel when it absorbs a GEMM, or a row
 * (reduce) kernel when it absorbs a reduction or must write a per-row value.
 */
export interface Adaptation {
  /** The kernel's new kind, space, reduced axes and anchor (fields left out keep their value). */
  readonly kernel?: Partial<Pick<FusedKernel, "kind" | "space" | "axes" | "anchor">>;
  /** How the joining node is read once it is in the kernel (replaces the need it was asked with). */
  readonly need?: ReadonlySet<Need>;
  /** Every member read at the element level is then read at the row level (the kernel becomes a row epilogue). */
  readonly membersToRow?: boolean;
}

/** A fusion decision: yes (with how the kernel adapts, if it does) or no with the reason. */
export type Verdict =
  | { readonly ok: true; readonly adapt?: Adaptation }
  | { readonly ok: false; readonly reason: string };
export const YES: Verdict = { ok: true };
export const no = (reason: string): Verdict => ({ ok: false, reason });
