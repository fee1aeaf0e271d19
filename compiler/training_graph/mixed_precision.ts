/**
 * Mixed-precision policy, GEMM level: matmuls run on f16 (or bf16) operands with f32 accumulation and
 * their results return to f32, so every reduction (LayerNorm, softmax, losses) and every parameter stays
 * f32. The casts sit next to the matmul, so fusion folds them into the GEMM's operand loads and epilogue.
 *
 * The storage half is decided after fusion (compiler/storage/storage_precision.ts): activations that cross
 * between kernels are stored in the low precision while every kernel computes in f32. The cast back to
 * f32 costs nothing in the fused kernel (its epilogue reads the f32 accumulator, never rounded to f16;
 * the stored result is narrowed by the storage policy). Rounding the GEMM result to f16 before the
 * epilogue instead (bias, GELU, residual, LayerNorm input from an f16 value) would save no bytes, and
 * accuracy did not decide it: on BERT-tiny (fixture, batch 4, sequence 16, three seeds, f16 storage) the
 * gradients' relative L2 error against the f32 graph was 6.4–6.8e-4 from the f32 accumulator and
 * 5.9–6.2e-4 rounded (3.9–4.9e-4 either way with f32 storage), the loss's 1e-7–5e-6 either way: a
 * difference well under what the storage narrowing itself costs, not worth a conversion per element.
 */
import { type DType, Graph, type MixedPrecision, type NodeId } from "../../ir/mod.ts";

export type Precision = MixedPrecision;

export const LOW_DTYPE: Record<Precision, DType> = { fp32: "f32", fp16: "f16", bf16: "bf16" };

export function applyPrecision(g: Graph, precision: Precision): Graph {
  if (precision === "fp32") return g;
  const low = LOW_DTYPE[precision];
  const out = new Graph(g.name, precision);
  const map: NodeId[] = [];
  for (const n of g.nodes) {
    const ins = n.inputs.map((i) => map[i]);
    if (n.op === "matmul" && n.type.dtype === "f32") {
      const a = out.add("cast", [ins[0]], { to: low }, undefined, n.loc);
      const b = out.add("cast", [ins[1]], { to: low }, undefined, n.loc);
      const mm = out.add("matmul", [a, b], n.attrs, undefined, n.loc);
      map[n.id] = out.add("cast", [mm], { to: "f32" }, undefined, n.loc);
      continue;
    }
    map[n.id] = out.add(n.op, ins, n.attrs, n.type, n.loc);
  }
  for (const [name, id] of g.outputs) out.setOutput(name, map[id]);
  return out;
}
