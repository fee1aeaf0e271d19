/**
 * A scatter-add into a table of few rows, as a masked column sum, for a GPU: `table[r, c] = sum over tokens
 * i of (ids[i] == r ? upd[i, c] : 0)`, which the column-sums stage splits into parts: many threads in a
 * fixed order, no atomics, where the scatter lowering walks every token in one thread per (row, column).
 * Pays only for few rows (`scatterMaskedMaxRows`; 0 on lavapipe and the CPU). BERT's token-type gradient,
 * measured: DESIGN.md, notes: compiler/passes/scatter_column_sums.ts.
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
