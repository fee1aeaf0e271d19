/**
 * cuBLASLt's GELU epilogues as the plans use them (LtCall with the plan's row-major descriptors), on a GPU:
 * the questions the CPU shim and the fake library answer by assumption (issue 16 item 1).
 *
 * - GELU_AUX_BIAS (f32, f16, bf16, the bias in D's type): P = A·Bᵀ + bias and D = GELU(P) against the CPU on
 *   the same rounded inputs, GELU the tanh form. The two forms differ by at most 4.7e-4 (at x = −2.70), under
 *   the tolerance relative to the largest |D|, so in f32 D must also be at least 4× closer to the tanh form
 *   than to the erf form (largest absolute errors): a library whose GELU were the erf form fails. (In f16 and
 *   bf16 the rounding of D, 2e-3 at |x| ~ 2.7, hides the difference; those lines report it only.)
 * - DGELU (f32, f16, bf16): D = (A·Bᵀ)·GELU'(P) for a stored P.
 * - f32 biases on f16 / bf16 products (BIAS and GELU_AUX_BIAS with BIAS_DATA_TYPE = CUDA_R_32F), which
 *   cublasLt.h does not document and compiler/lower/gemm_library.ts LT_BIAS_TYPES therefore refuses: the
 *   line says whether this library finds an algorithm and computes the right values. A refusal is reported
 *   as such and is not a failure; wrong values are.
 */
import type { CudaContext } from "../runtime/cuda/context.ts";
import { type CublasLt, type GemmDType, LtCall, type LtCallSpec } from "../runtime/cuda/cublaslt.ts";
import { decodeStored, encodeStored } from "../runtime/cuda/host.ts";
import type { PlanBuffer } from "../plan/plan.ts";
import { seededRandom } from "../cases/random.ts";
import { erf } from "../numeric/erf.ts";

type Report = (name: string, ok: boolean, detail: string) => void;

const C = Math.sqrt(2 / Math.PI), A3 = 0.044715;
const geluTanh = (x: number) => 0.5 * x * (1 + Math.tanh(C * (x + A3 * x ** 3)));
const geluErf = (x: number) => 0.5 * x * (1 + erf(x / Math.SQRT2));
const geluTanhSlope = (x: number) => {
  const t = Math.tanh(C * (x + A3 * x ** 3));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * C * (1 + 3 * A3 * x * x);
};

const TOL: Record<GemmDType, { rtol: number; atol: number }> = {
  f32: { rtol: 1e-4, atol: 1e-5 },
  f16: { rtol: 4e-3, atol: 1e-3 },
  bf16: { rtol: 3e-2, atol: 1e-2 },
};

/** Largest |got - want| over the allowed error (<= 1 passes). */
function ratio(want: ArrayLike<number>, got: ArrayLike<number>, dtype: GemmDType): number {
  let maxRef = 0, maxErr = 0;
  for (let i = 0; i < want.length; i++) {
    maxRef = Math.max(maxRef, Math.abs(want[i]));
    const e = Math.abs(got[i] - want[i]);
    if (!(e <= maxErr)) maxErr = Number.isNaN(e) ? Infinity : e;
  }
  return maxErr / (TOL[dtype].atol + TOL[dtype].rtol * maxRef);
}

/** Largest |got - want|. */
function maxAbs(want: ArrayLike<number>, got: ArrayLike<number>): number {
  let e = 0;
  for (let i = 0; i < want.length; i++) {
    const d = Math.abs(got[i] - want[i]);
    if (!(d <= e)) e = Number.isNaN(d) ? Infinity : d;
  }
  return e;
}

/**
 * Copies `v`, stored as buffer `b` is, to a fresh device allocation of at least 256 bytes (cuBLASLt's
 * alignment), whose pointer also goes into `ptrs` for the caller to free.
 */
export function uploader(
  ctx: CudaContext,
  ptrs: bigint[],
  label: string,
): (b: PlanBuffer, v: ArrayLike<number>) => bigint {
  return (b, v) => {
    const bytes = encodeStored(b, v);
    const p = ctx.driver.alloc(Math.max(bytes.byteLength, 256), label);
    ptrs.push(p);
    ctx.driver.copyHtoD(p, bytes, `${label} ${b.name}`);
    return p;
  };
}

export function geluEpilogueChecks(ctx: CudaContext, lt: CublasLt, report: Report, seed: number): void {
  const { driver } = ctx;
  const stream = driver.createStream();
  const r = seededRandom(seed);
  // P [m, n] = X [m, k] · W [n, k]ᵀ (+ bias [n]): a linear layer's shapes; n a multiple of 8 (AUX_LD).
  const [m, n, k] = [96, 64, 40];
  const buf = (name: string, dtype: GemmDType, len: number): PlanBuffer => ({
    id: 0,
    name,
    dtype,
    shape: [len],
    bytes: 0,
    role: "input",
    slot: 0,
  });
  const cases: { kind: "gelu_aux_bias" | "dgelu" | "bias"; dtype: GemmDType; biasType: GemmDType }[] = [
    ...(["f32", "f16", "bf16"] as const).flatMap((dtype) => [
      { kind: "gelu_aux_bias" as const, dtype, biasType: dtype },
      { kind: "dgelu" as const, dtype, biasType: dtype },
    ]),
    ...(["f16", "bf16"] as const).flatMap((dtype) => [
      { kind: "bias" as const, dtype, biasType: "f32" as const },
      { kind: "gelu_aux_bias" as const, dtype, biasType: "f32" as const },
    ]),
  ];
  try {
    for (const { kind, dtype, biasType } of cases) {
      const f32Bias = biasType !== dtype;
      const label = `cuBLASLt LtCall ${kind.toUpperCase()} ${dtype}${f32Bias ? " with an f32 bias" : ""}`;
      const round = (b: PlanBuffer, v: Float64Array) => decodeStored(b, encodeStored(b, v));
      const X = buf("X", dtype, m * k), W = buf("W", dtype, n * k), D = buf("D", dtype, m * n);
      const B = buf("bias", biasType, n);
      const x = round(X, Float64Array.from({ length: m * k }, () => r.normal() * 0.5));
      const w = round(W, Float64Array.from({ length: n * k }, () => r.normal() * 0.5));
      const bias = round(B, Float64Array.from({ length: n }, () => r.normal()));
      const pre = round(D, Float64Array.from({ length: m * n }, () => r.normal() * 2));
      const prod = new Float64Array(m * n);
      for (let i = 0; i < m; i++) {
        for (let j = 0; j < n; j++) {
          let s = 0;
          for (let p = 0; p < k; p++) s += x[i * k + p] * w[j * k + p];
          prod[i * n + j] = s + (kind === "dgelu" ? 0 : bias[j]);
        }
      }
      const spec: LtCallSpec = {
        m,
        n,
        k,
        batch: 1,
        a: { dtype, ld: k, trans: false, batchStride: 0 },
        b: { dtype, ld: k, trans: true, batchStride: 0 },
        d: { dtype, ld: n, trans: false, batchStride: m * n },
        epilogue: kind === "dgelu"
          ? { kind, aux: { dtype, ld: n } }
          : kind === "bias"
          ? { kind, bias: { dtype: biasType, batchStride: 0 } }
          : { kind, bias: { dtype: biasType, batchStride: 0 }, aux: { dtype, ld: n } },
        align: { a: 256, b: 256, d: 256, bias: 256, aux: 256 },
      };
      const ptrs: bigint[] = [];
      let call: LtCall | undefined;
      try {
        const up = uploader(ctx, ptrs, label);
        const px = up(X, x), pw = up(W, w), pb = up(B, bias), pd = up(D, new Float64Array(m * n).fill(NaN));
        const paux = up(D, kind === "dgelu" ? pre : new Float64Array(m * n).fill(NaN));
        try {
          call = new LtCall(lt, spec, label);
        } catch (e) {
          // An f32 bias on an f16/bf16 D: the library's answer is the finding, not a failure.
          if (f32Bias && /no algorithm|CUBLAS_STATUS/.test((e as Error).message)) {
            report(label, true, `refused (LT_BIAS_TYPES stays as it is): ${(e as Error).message}`);
            continue;
          }
          throw e;
        }
        call.run(
          px,
          pw,
          pd,
          stream,
          label,
          kind === "dgelu" ? undefined : pb,
          undefined,
          kind === "bias" ? undefined : paux,
        );
        driver.synchronize(stream);
        const read = (p: bigint) => {
          const bytes = new Uint8Array(m * n * (dtype === "f32" ? 4 : 2));
          driver.copyDtoH(bytes, p, label);
          return decodeStored(D, bytes);
        };
        const got = read(pd);
        if (kind === "bias") {
          const q = ratio(prod, got, dtype);
          report(label, q <= 1, `accepted; error ${q.toFixed(3)} of the tolerance`);
        } else if (kind === "dgelu") {
          const q = ratio(prod.map((v, i) => v * geluTanhSlope(pre[i])), got, dtype);
          report(label, q <= 1, `error ${q.toFixed(3)} of the tolerance (tanh-form GELU')`);
        } else {
          const qa = ratio(prod, read(paux), dtype);
          const qt = ratio(prod.map(geluTanh), got, dtype);
          const et = maxAbs(prod.map(geluTanh), got), ee = maxAbs(prod.map(geluErf), got);
          const tanhForm = dtype !== "f32" || 4 * et < ee;
          report(
            label,
            qa <= 1 && qt <= 1 && tanhForm,
            `${f32Bias ? "accepted; " : ""}aux error ${qa.toFixed(3)}, D error ${qt.toFixed(3)} of the ` +
              `tolerance; largest |D - GELU| ${et.toExponential(2)} for the tanh form, ${
                ee.toExponential(2)
              } for the erf form`,
          );
        }
      } catch (e) {
        report(label, false, `threw: ${(e as Error).message}`);
      } finally {
        call?.destroy();
        for (const p of ptrs) driver.free(p);
      }
    }
  } finally {
    driver.destroyStream(stream);
  }
}
