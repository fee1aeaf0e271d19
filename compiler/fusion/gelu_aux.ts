/**
 * Pre-activations stored for cuBLASLt's DGELU epilogue (issue 16 item 1; compiler/lower/gemm_gelu.ts).
 *
 * Where GEMMs write their raw product (plans for CUDA alone, remat.ts rawGemmOutputs), a linear layer's
 * activation is a loop kernel reading the product, and the backward recomputes the pre-activation
 * P = product + bias where it reads it: the dY·W2ᵀ call writes a scratch product and an epilogue kernel
 * reads it back with the product and the bias to compute dP = dY·W2ᵀ · GELU'(P). For the tanh-form GELU,
 * cuBLASLt's DGELU epilogue computes that dP in the call itself from P stored as its auxiliary input, so
 * P is made a root here: the forward's loop kernel also writes P (stored in the activations' storage
 * type, which is D's type, as cublasLt.h's EPILOGUE_AUX_DATA_TYPE default requires), and the backward
 * reads it instead of recomputing it. Per layer of BERT-large at batch 64, sequence 128 (fp16): one
 * 64 MiB write more in the forward, and the backward's scratch product and epilogue kernel (64 MiB
 * written, 128 MiB read back, and the bias) gone.
 *
 * Only where the gradient of the activation is in the graph (training) and is exactly D·GELU'(P)
 * (gemm_gelu.ts tanhGeluGradient); the erf GELU never matches.
 */
import type { Graph, NodeId } from "../../ir/mod.ts";
import { numel } from "../../ir/mod.ts";
import { tanhGeluGradient, tanhGeluInput } from "../lower/gemm_gelu.ts";
import { usersOf } from "./needs.ts";

/** Pre-activations of tanh-form GELUs whose exact gradient the graph computes and a GEMM reads. */
export function geluAuxRoots(g: Graph): Set<NodeId> {
  const users = usersOf(g);
  // The gradient feeds dX = dP·W1 and dW1 (through reshapes and the cast to the GEMMs' type): only such
  // nodes are candidates.
  const readByGemm = (id: NodeId): boolean =>
    users[id].some((u) => {
      const op = g.nodes[u].op;
      return op === "matmul" || ((op === "reshape" || op === "cast") && readByGemm(u));
    });
  const grads = g.nodes.filter((n) => n.type.dtype === "f32" && readByGemm(n.id));
  const out = new Set<NodeId>();
  for (const n of g.nodes) {
    if (n.op !== "mul" || n.type.dtype !== "f32") continue;
    const pre = tanhGeluInput(g, n.id);
    if (pre === undefined || out.has(pre)) continue;
    const size = numel(g.nodes[pre].type.shape);
    if (grads.some((d) => numel(d.type.shape) === size && tanhGeluGradient(g, d.id, pre) !== undefined)) {
      out.add(pre);
    }
  }
  return out;
}
