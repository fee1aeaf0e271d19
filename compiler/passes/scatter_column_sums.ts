/**
 * A scatter-add into a table of few rows, as a masked column sum, for a GPU. BERT's token-type embedding
 * gradient adds 8,192 tokens' updates into a table of 2 rows × 1,024 columns; the scatter lowering
 * (lower/lower_kernel.ts lowerScatter) gives one thread per (owned row, column), so at most rows × columns
 * threads (2,048), each walking every token serially: the cost model put it at 742 µs of a 48 ms step.
 *
 * Rewritten as `table[r, c] = sum over tokens i of (ids[i] == r ? upd[i, c] : 0)`: ids and updates
 * broadcast to [tokens, rows, columns], a `where` against an iota over the rows, a reduce_sum over the
 * tokens. That is a column sum (leading axis reduced, [rows, columns] kept), so the column-sums stage
 * (column_sums.ts) splits it into parts and a sum of the parts, and fusion folds the mask into the first
 * pass: rows × columns × parts threads, each over tokens / parts tokens, in a fixed order, no atomics. An id
 * outside [0, rows) equals no row of the iota, so its update is dropped, as the scatter lowering drops it.
 * The order of the additions changes (per part, then the parts), as for any split column sum.
 *
 * Each table row's sum reads every update, so the reads grow with the rows; the profile's
 * `scatterMaskedMaxRows` bounds where this pays (targets/profiles.ts). Lavapipe and the CPU keep the
 * scatter (0 there: a workgroup is a loop on one core, where the serial walk has nothing to fill).
 */
import { type Attrs, Graph, type NodeId, numel, type TensorType } from "../../ir/mod.ts";
import { copyNode, copyOutputs } from "../graph/rebuild.ts";

/** `g` with each scatter-add of at most `maxRows` rows written as a masked column sum; `g` when none is. */
export function scattersAsColumnSums(g: Graph, maxRows: number): { graph: Graph; rewritten: number } {
  const chosen = g.nodes.filter((n) => {
    if (n.op !== "scatter_add") return false;
    const rows = n.attrs.rows as number;
    return rows >= 1 && rows <= maxRows;
  });
  if (chosen.length === 0) return { graph: g, rewritten: 0 };
  const pick = new Set(chosen.map((n) => n.id));
  const out = new Graph(g.name, g.precision);
  const newId: NodeId[] = [];
  for (const n of g.nodes) {
    const ins = n.inputs.map((i) => newId[i]);
    if (!pick.has(n.id)) {
      newId[n.id] = copyNode(out, n, ins);
      continue;
    }
    const [idsId, updId] = n.inputs;
    const ids = g.nodes[idsId].type, upd = g.nodes[updId].type;
    const tokens = numel(ids.shape);
    const rows = n.attrs.rows as number;
    const cols = numel(upd.shape.slice(ids.shape.length));
    const space = [tokens, rows, cols];
    const at = (op: string, inputs: NodeId[], attrs: Attrs = {}, declared?: TensorType) =>
      out.add(op, inputs, attrs, declared, n.loc);
    const idsB = at("broadcast", [at("reshape", [ins[0]], { shape: [tokens, 1, 1] })], { shape: space });
    const row = at("iota", [], { axis: 1 }, { shape: space, dtype: ids.dtype });
    const updB = at("broadcast", [at("reshape", [ins[1]], { shape: [tokens, 1, cols] })], { shape: space });
    const zero = at("const", [], { value: 0 }, { shape: space, dtype: upd.dtype });
    const masked = at("where", [at("eq", [idsB, row]), updB, zero]);
    const sum = at("reduce_sum", [masked], { axes: [0] });
    newId[n.id] = at("reshape", [sum], { shape: [...n.type.shape] });
  }
  copyOutputs(g, out, newId);
  return { graph: out, rewritten: chosen.length };
}
