/**
 * Index "needs": how a kernel member's users read it (see `Need` in types.ts). Fusion uses them to
 * refuse fusions that would recompute a reduction or a matmul per element.
 */
import type { Graph, Node } from "../../ir/mod.ts";
import { isElementwise } from "../../ir/ops.ts";
import type { Need } from "./types.ts";

export const ELEM: Need = "elem";
export const ANY: Need = "any";
export const OPERAND: Need = "operand";
/** Read at the current row of a reduce kernel (reduced axes 0): the level of reduction results. */
export const ROW: Need = "row";
/**
 * Read through a broadcast from a tensor with `axes` of size 1 to `shape`, at the element index: this
 * is a row-level read if the kernel becomes a reduction over `axes` of `shape`.
 */
export const rowCandidate = (axes: readonly number[], shape: readonly number[]): Need =>
  `rowcand:${axes.join(",")}:${shape.join("x")}`;
export function parseRowCandidate(n: Need): { axes: number[]; shape: number[] } | undefined {
  if (!n.startsWith("rowcand:")) return undefined;
  const [, axes, shape] = n.split(":");
  return { axes: axes.split(",").map(Number), shape: shape.split("x").map(Number) };
}

/**
 * The need a member `user` places on its operand at position `pos`, given how `user` itself is read.
 */
export function operandNeed(g: Graph, user: Node, pos: number, userNeeds: ReadonlySet<Need>): Set<Need> {
  const out = new Set<Need>();
  if (isElementwise(user.op) || user.op === "cast") {
    for (const n of userNeeds) out.add(n);
    return out;
  }
  switch (user.op) {
    case "reduce_sum":
    case "reduce_max":
      out.add(ELEM);
      return out;
    case "matmul":
      out.add(OPERAND);
      return out;
    case "scatter_add":
      out.add(pos === 1 ? ELEM : ANY);
      return out;
    case "broadcast": {
      const inShape = g.nodes[user.inputs[0]].type.shape;
      const outShape = user.type.shape;
      for (const n of userNeeds) {
        if (n === ELEM && inShape.length === outShape.length) {
          const expanded: number[] = [];
          for (let d = 0; d < outShape.length; d++) {
            if (inShape[d] === 1 && outShape[d] !== 1) expanded.push(d);
          }
          out.add(expanded.length === 0 ? ELEM : rowCandidate(expanded, outShape));
        } else {
          out.add(n === OPERAND ? OPERAND : ANY);
        }
      }
      return out;
    }
    case "reshape":
      // A reshape keeps the row-major element order, so an element-level read stays at the same linear
      // position (joins check shapes where they matter); a row-level read names axes that no longer exist.
      for (const n of userNeeds) out.add(n === ELEM || n === OPERAND || n === ROW ? n : ANY);
      return out;
    default:
      // permute, slice, pad, concat, gather, random_uniform keys: arbitrary index math.
      for (const n of userNeeds) out.add(n === OPERAND ? OPERAND : ANY);
      return out;
  }
}

export function describeNeeds(needs: ReadonlySet<Need>): string {
  return [...needs].sort().join(" and ");
}
