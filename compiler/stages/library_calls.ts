/**
 * Library calls (CUDA): GEMMs as cuBLASLt calls where they qualify (compiler/lower/gemm_library.ts). The
 * product goes straight to the kernel's output when the epilogue is only that store; otherwise to a scratch
 * buffer of the plan that an epilogue kernel reads. A column sum over k of a call's operand becomes its
 * BGRAD epilogue (lower/gemm_bgrad.ts), and a sum of the product with a stored tensor reads that tensor as
 * C with beta 1. Why the scratch is a plan buffer: DESIGN.md, notes: compiler/stages/library_calls.ts.
 */
import { numel } from "../../ir/mod.ts";
import { bgradEpilogues } from "../lower/gemm_bgrad.ts";
import { deriveGemm, type GemmVerdict, outputOperand } from "../lower/gemm_library.ts";
import { lowerGemmEpilogue } from "../lower/lower_kernel.ts";
import { vectorizeLoop } from "../lower/vectorize.ts";
import type { Stage } from "../pipeline/stage_runner.ts";
import {
  type GemmDecision,
  type KernelState,
  type LibraryGemm,
  need,
  type StateBuffer,
  valueContext,
} from "./state.ts";

const NAME = "library-calls";

export const libraryCallsStage: Stage<KernelState> = {
  name: NAME,
  about: "CUDA: GEMMs that qualify become cuBLASLt calls, with an epilogue kernel where one is left",
  run: (s) => {
    const t = s.options.target;
    if (t.implements.gemm === "template") return { ...s, gemms: [] };
    // cuBLASLt takes epilogues and a stored sum as C; the CPU's BLAS neither, and groups cost it nothing.
    const cuda = t.implements.gemm === "cublaslt";
    const g = s.graph;
    const fusion = need(s.fusion, "the fusion", NAME);
    const kernels = need(s.kernels, "lowered kernels", NAME);
    const ctx = valueContext(s, NAME);
    const buffers: StateBuffer[] = [...need(s.buffers, "buffers", NAME)];
    const gemms: GemmDecision[] = [];
    const gemmOf = new Map<number, LibraryGemm>();
    fusion.kernels.forEach((k, i) => {
      if (k.kind !== "matmul") return;
      const kctx = { ...ctx, members: k.members };
      const v = deriveGemm(g, k, kctx, { biasEpilogue: cuda, sumC: cuda, groupsFree: !cuda });
      if (!v.ok) {
        gemms.push({ kernel: kernels[i].name, library: false, reason: v.reason });
        return;
      }
      const base = callBase(v);
      if (v.direct) {
        const d = directGemm(v, v.direct, kernels[i].name);
        gemmOf.set(i, d.gemm);
        gemms.push(d.decision);
        return;
      }
      const mm = g.nodes[k.anchor!];
      const scratch = buffers.length;
      const dtype = v.scratchDtype ?? "f32";
      buffers.push({
        id: scratch,
        name: `%${mm.id} matmul product ${dtype} (cuBLASLt)`,
        dtype,
        shape: [...mm.type.shape],
        bytes: numel(mm.type.shape) * (dtype === "f32" ? 4 : 2),
        role: "activation",
      });
      const lowered = lowerGemmEpilogue(g, k, kctx, { buffer: scratch, dtype });
      const epilogue = s.vectorized ? vectorizeLoop(lowered) : lowered;
      const d = outputOperand(scratch, dtype, v.m, v.n, v.outer ? v.scratchBatch : undefined);
      gemmOf.set(i, { call: { ...base, d }, epilogue, scratch });
      gemms.push({ kernel: kernels[i].name, library: true, reason: "cuBLASLt, then an epilogue kernel" });
    });
    // CUDA (the fallback kernels exist only there): column sums of a call's operand over k become
    // its bias-gradient epilogue (gemm_bgrad.ts).
    if (cuda) {
      const bg = bgradEpilogues(
        {
          graph: g,
          fusion,
          kernels,
          bufferOfNode: need(s.bufferOfNode, "buffers", NAME),
          bufferDtype: (b) => buffers[b].dtype,
        },
        new Map([...gemmOf].map(([i, l]) => [i, l.call])),
      );
      for (const [i, choice] of bg) {
        gemmOf.set(i, { ...gemmOf.get(i)!, call: choice.call });
        // The covered kernels are named in the plan (the epilogue's fallback), not here: reasons are counted.
        const d = gemms.findIndex((x) => x.kernel === kernels[i].name);
        gemms[d] = {
          ...gemms[d],
          reason: `${
            gemms[d].reason
          }, and the bias gradient of an operand (BGRAD epilogue; its column sums kept as the fallback)`,
        };
      }
    }
    return { ...s, buffers, gemmOf, gemms };
  },
  // Every GEMM runs as the template kernel.
  skip: (s) => ({ ...s, gemms: [] }),
};

type Derived = Extract<GemmVerdict, { ok: true }>;

/** The call's sizes and operands, without D. */
const callBase = (v: Derived) => ({
  m: v.m,
  n: v.n,
  k: v.k,
  batch: v.batch,
  ...(v.outer ? { outer: v.outer } : {}),
  a: v.a,
  b: v.b,
  compute: "32F" as const,
});

/** The library GEMM of a kernel whose root cuBLASLt writes itself, and its decision. */
function directGemm(
  v: Derived,
  direct: NonNullable<Derived["direct"]>,
  kernel: string,
): { gemm: LibraryGemm; decision: GemmDecision } {
  const { bias, c } = direct;
  return {
    gemm: {
      call: {
        ...callBase(v),
        d: direct.d,
        ...(c ? { c } : {}),
        ...(bias ? { epilogue: { kind: "bias", bias } } : {}),
      },
    },
    decision: {
      kernel,
      library: true,
      reason: "cuBLASLt writes the output" +
        (direct.heads ? " heads-major, a batch entry per head" : "") +
        (bias ? ", adding the bias (BIAS epilogue)" : "") +
        (c ? ", adding a stored sum as C (beta 1)" : ""),
    },
  };
}
