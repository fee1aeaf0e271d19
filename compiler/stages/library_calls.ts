/**
 * Library calls in two stages. gemm-calls, before fusion, decides on the graph which matmuls are calls
 * (compiler/passes/gemm_calls.ts). library-calls, on the fusion before any buffer exists, derives each
 * call's kernel (compiler/lower/gemm_library.ts): a cuBLASLt or sgemm call writing the kernel's output itself
 * or a scratch product that an epilogue kernel reads, or its template kernel where the stored dtypes or
 * layouts do not fit. The calls name nodes, not buffers: the buffers stage adds the scratch products, the
 * lower stage lowers the epilogues with every other kernel and puts the buffers in (`libraryGemmOf`). On CUDA
 * a column sum over k of a call's operand becomes its BGRAD epilogue (lower/gemm_bgrad.ts). Why the scratch
 * is a plan buffer: DESIGN.md, notes: compiler/stages/library_calls.ts.
 */
import { bgradEpilogues } from "../lower/gemm_bgrad.ts";
import { deriveGemm, outputOperand } from "../lower/gemm_library.ts";
import { kernelName } from "../lower/naming.ts";
import { lowerGemmEpilogue } from "../lower/lower_kernel.ts";
import { gemmCallsOnGraph } from "../passes/gemm_calls.ts";
import { productsSummedFirst } from "../passes/gemm_sum_order.ts";
import type { PlanGemmOperand, PlanGemmVector } from "../../plan/plan.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import type { FusedKernel } from "../fusion/types.ts";
import type { ValueContext } from "../lower/values.ts";
import {
  type GemmCall,
  type GemmDecision,
  type KernelState,
  type LibraryGemm,
  need,
  storedTypeOf,
  valueContext,
} from "./state.ts";

export const gemmCallsStage: Stage<KernelState> = {
  name: "gemm-calls",
  about:
    "matmuls whose operands a library can read become library calls (cuBLASLt, sgemm), decided on the graph",
  run: (s, ctx) => {
    const gemm = s.options.target.implements.gemm;
    if (gemm === "template") return s;
    // cuBLASLt adds a stored sum as C (beta 1): in a sum of several products, the products are summed
    // first (passes/gemm_sum_order.ts), so each partial sum can be the next call's C.
    const ordered = gemm === "cublaslt" && s.options.fuse ? productsSummedFirst(s.graph) : undefined;
    if (ordered?.trees && ctx.flags.level >= 3) {
      console.error(`gemm-calls: ${ordered.trees} sums with their GEMM products first`);
    }
    const graph = ordered?.graph ?? s.graph;
    return { ...s, graph, graphCalls: gemmCallsOnGraph(graph, gemm === "cublaslt") };
  },
  // Every GEMM a template kernel: library-calls then makes no call.
  skip: (s) => s,
};

const NAME = "library-calls";

export const libraryCallsStage: Stage<KernelState> = {
  name: NAME,
  about:
    "GEMMs that qualify become library calls (cuBLASLt, sgemm), with an epilogue kernel where one is left",
  run: (s) => {
    const onGraph = s.graphCalls;
    if (!onGraph) return { ...s, gemms: [] };
    // cuBLASLt takes epilogues and a stored sum as C; the CPU's BLAS neither, and groups cost it nothing.
    const cuda = s.options.target.implements.gemm === "cublaslt";
    const g = s.graph, fusion = need(s.fusion, "the fusion", NAME);
    const ctx = valueContext(s, NAME, "nodes");
    const calls = new Map<number, GemmCall>();
    const gemms: GemmDecision[] = [];
    const decisionOf = new Map<number, number>(); // kernel index -> its entry in gemms
    fusion.kernels.forEach((k, i) => {
      if (k.kind !== "matmul") return;
      const kernel = kernelName(g, k);
      const refused = onGraph.refused.get(k.anchor!);
      if (refused !== undefined) return gemms.push({ kernel, library: false, reason: refused });
      const v = deriveGemm(g, k, { ...ctx, members: k.members }, {
        biasEpilogue: cuda,
        sumC: cuda,
        groupsFree: !cuda,
      });
      decisionOf.set(i, gemms.length);
      if (!v.ok) return gemms.push({ kernel, library: false, reason: v.reason });
      calls.set(i, v);
      const d = v.direct;
      gemms.push({
        kernel,
        library: true,
        reason: !d ? "cuBLASLt, then an epilogue kernel" : "cuBLASLt writes the output" +
          (d.heads ? " heads-major, a batch entry per head" : "") +
          (d.bias ? ", adding the bias (BIAS epilogue)" : "") +
          (d.c ? ", adding a stored sum as C (beta 1)" : ""),
      });
    });
    // CUDA (the fallback kernels exist only there): column sums of a call's operand over k become its
    // bias-gradient epilogue (gemm_bgrad.ts), the covered kernels named in the plan as its fallback.
    const bg = !cuda ? new Map() : bgradEpilogues(
      { graph: g, fusion, storedType: (id) => storedTypeOf(s, id) },
      new Map([...calls].map(([i, v]) => [i, {
        ...v,
        dDtype: v.direct?.dtype ?? v.scratchDtype ?? "f32",
        epilogue: !!v.direct?.bias,
      }])),
    );
    for (const [i, bgrad] of bg) {
      calls.set(i, { ...calls.get(i)!, bgrad });
      const d = decisionOf.get(i)!;
      gemms[d] = {
        ...gemms[d],
        reason: `${
          gemms[d].reason
        }, and the bias gradient of an operand (BGRAD epilogue; its column sums kept as the fallback)`,
      };
    }
    return { ...s, calls, gemms };
  },
  // Every GEMM runs as the template kernel.
  skip: (s) => ({ ...s, gemms: [] }),
};

/**
 * The library GEMM of matmul kernel `k` (the lower stage's, for a kernel library-calls made a call): the
 * call with its nodes' buffers, and where it writes a scratch product the epilogue kernel reading it.
 */
export function libraryGemmOf(
  g: KernelState["graph"],
  k: FusedKernel,
  v: GemmCall,
  ctx: ValueContext,
  scratch: number | undefined,
): LibraryGemm {
  const at = <T extends PlanGemmOperand | PlanGemmVector>(o: T): T => ({
    ...o,
    buffer: ctx.bufferOf(o.buffer),
  });
  const { ok: _, direct: d, scratchBatch, scratchDtype, bgrad, ...sizes } = v;
  const base = {
    ...sizes,
    a: at(v.a),
    b: at(v.b),
    compute: "32F" as const,
    ...(bgrad
      ? { epilogue: { ...bgrad, bias: at(bgrad.bias), copies: bgrad.copies.map(ctx.bufferOf) } }
      : {}),
  };
  if (d) {
    return {
      call: {
        ...base,
        d: at(d.d),
        ...(d.c ? { c: at(d.c) } : {}),
        ...(d.bias ? { epilogue: { kind: "bias", bias: at(d.bias) } } : {}),
      },
    };
  }
  if (scratch === undefined) {
    throw new Error(`internal: the call of ${kernelName(g, k)} has no scratch product`);
  }
  const dtype = scratchDtype ?? "f32";
  return {
    call: { ...base, d: outputOperand(scratch, dtype, v.m, v.n, v.outer ? scratchBatch : undefined) },
    epilogue: lowerGemmEpilogue(g, k, ctx, { buffer: scratch, dtype }),
    scratch,
  };
}
