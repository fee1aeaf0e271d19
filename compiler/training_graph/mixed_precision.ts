/**
 * Mixed-precision policy, GEMM level: matmuls run on f16 (or bf16) operands with f32 accumulation and
 * their results return to f32, so every reduction (LayerNorm, softmax, losses) and every parameter stays
 * f32. The casts sit next to the matmul, so fusion folds them into the GEMM's operand loads and epilogue.
 * The storage half is compiler/storage/storage_precision.ts. Why the epilogue reads the f32 accumulator,
 * not a result rounded to f16 (measured): DESIGN.md, notes: compiler/training_graph/mixed_precision.ts.
 */
import { type DType, Graph, isComposite, type MixedPrecision, type Node, type NodeId } from "../../ir/mod.ts";

export type Precision = MixedPrecision;

export const LOW_DTYPE: Record<Precision, DType> = { fp32: "f32", fp16: "f16", bf16: "bf16" };

export function applyPrecision(g: Graph, precision: Precision): Graph {
  if (precision === "fp32") return g;
  const out = new Graph(g.name, precision);
  const map: NodeId[] = [];
  for (const n of g.nodes) map[n.id] = addWithPrecision(out, n, n.inputs.map((i) => map[i]), precision);
  for (const [name, id] of g.outputs) out.setOutput(name, map[id]);
  return out;
}

/**
 * Appends a copy of `n` reading `ins` to `out` under `precision`: an f32 matmul on low operands as above; a
 * composite (attention) told its GEMMs' operand dtype in its `low` attribute, for its decomposition.
 */
export function addWithPrecision(out: Graph, n: Node, ins: readonly NodeId[], precision: Precision): NodeId {
  const low = LOW_DTYPE[precision];
  if (precision !== "fp32" && isComposite(n.op)) {
    return out.add(n.op, ins, { ...n.attrs, low }, n.type, n.loc);
  }
  if (precision === "fp32" || n.op !== "matmul" || n.type.dtype !== "f32") {
    return out.add(n.op, ins, n.attrs, n.type, n.loc);
  }
  const a = out.add("cast", [ins[0]], { to: low }, undefined, n.loc);
  const b = out.add("cast", [ins[1]], { to: low }, undefined, n.loc);
  const mm = out.add("matmul", [a, b], n.attrs, undefined, n.loc);
  return out.add("cast", [mm], { to: "f32" }, undefined, n.loc);
}
