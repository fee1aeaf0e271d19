/**
 * In-place concatenation: a flat vector assembled from many tensors without a kernel that copies them. As
 * XLA's buffer assignment can do for a concatenate, each operand is placed inside the concat's buffer (a
 * parameter's buffer is a range of the flat parameter vector, a gradient's kernel writes into its range of
 * the flat gradient vector), at a multiple of PLAN_OFFSET_ALIGN bytes. Why, and what qualifies: DESIGN.md,
 * notes: compiler/fusion/in_place.ts.
 */
import { byteSize, type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { PLAN_OFFSET_ALIGN } from "../../plan/plan.ts";

export interface Placement {
  /** The in-place concat whose buffer holds this tensor. */
  readonly concat: NodeId;
  /** Where the tensor starts inside the concat, in elements. */
  readonly elementOffset: number;
}

export interface InPlaceConcats {
  /** Concats assembled in place: materialized without a kernel. */
  readonly concats: ReadonlySet<NodeId>;
  /** Tensor -> its range inside a concat (every tensor here must be materialized). */
  readonly placed: ReadonlyMap<NodeId, Placement>;
  /** Concats that looked like flat vectors but could not be assembled in place, with the reason. */
  readonly refused: ReadonlyMap<NodeId, string>;
}

/** A zero fill: `const 0`, or a broadcast/reshape of one. */
function isZeroFill(g: Graph, id: NodeId): boolean {
  const n = g.nodes[id];
  if (n.op === "const") return n.attrs.value === 0 && !Object.is(n.attrs.value, -0);
  if (n.op === "broadcast" || n.op === "reshape") return isZeroFill(g, n.inputs[0]);
  return false;
}

/** Follows reshapes down to the tensor whose buffer an operand reads. */
function throughReshapes(g: Graph, id: NodeId): NodeId {
  let at = id;
  while (g.nodes[at].op === "reshape") at = g.nodes[at].inputs[0];
  return at;
}

const INLINE_SOURCES = new Set(["const", "iota"]);

export function findInPlaceConcats(g: Graph): InPlaceConcats {
  const concats = new Set<NodeId>();
  const placed = new Map<NodeId, Placement>();
  const refused = new Map<NodeId, string>();
  for (const n of g.nodes) {
    if (n.op !== "concat" || n.type.shape.length !== 1) continue;
    const parts = new Map<NodeId, number>();
    let offset = 0;
    let why: string | undefined;
    for (const operand of n.inputs) {
      const size = numel(g.nodes[operand].type.shape);
      if (!isZeroFill(g, operand)) {
        const base = throughReshapes(g, operand);
        const bn = g.nodes[base];
        if (INLINE_SOURCES.has(bn.op) || bn.op === "broadcast") {
          why = `operand %${base} ${bn.op} is not a tensor with a buffer`;
        } else if (placed.has(base) || parts.has(base)) {
          why = `%${base} is placed in another concat already`;
        } else if (concats.has(base)) {
          why = `%${base} is itself an in-place concat`;
        } else if ((offset * byteSize(n.type.dtype)) % PLAN_OFFSET_ALIGN !== 0) {
          why = `%${base} would start at byte ${offset * byteSize(n.type.dtype)}, not a multiple of ` +
            `${PLAN_OFFSET_ALIGN}`;
        } else parts.set(base, offset);
        if (why) break;
      }
      offset += size;
    }
    if (why) {
      refused.set(n.id, why);
      continue;
    }
    concats.add(n.id);
    for (const [base, elementOffset] of parts) placed.set(base, { concat: n.id, elementOffset });
  }
  return { concats, placed, refused };
}
