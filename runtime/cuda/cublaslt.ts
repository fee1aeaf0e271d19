/**
 * cuBLASLt (libcublasLt.so) through Deno FFI, for GEMMs on CUDA (DESIGN principle 5), with its bias and
 * bias-gradient epilogues. The executor runs plans' library GEMMs (PlanKernel.library) through `LtCall`;
 * bench/gpu_check.ts checks it against the CPU. Row-major tensors on a column-major library: D is computed
 * as Dᵀ = op(B)ᵀ·op(A)ᵀ, B passed as cuBLASLt's "A". The C signatures, from the documented API (no
 * cublasLt.h here): DESIGN.md, notes: runtime/cuda/cublaslt.ts.
 */
import type { CudaDriver, DevicePtr, Pointer } from "./driver.ts";
import { CudaError } from "./cuda_errors.ts";
import { discover, type DiscoverOptions, openDiscovered } from "./libs.ts";
import { ltDescriptors, type LtLayout } from "./lt_mapping.ts";

export const CUBLASLT_SYMBOLS = {
  cublasLtCreate: { parameters: ["buffer"], result: "i32" },
  cublasLtDestroy: { parameters: ["pointer"], result: "i32" },
  cublasLtGetVersion: { parameters: [], result: "usize" },
  cublasLtGetStatusName: { parameters: ["i32"], result: "pointer", optional: true },
  cublasLtMatmulDescCreate: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  cublasLtMatmulDescDestroy: { parameters: ["pointer"], result: "i32" },
  cublasLtMatmulDescSetAttribute: { parameters: ["pointer", "i32", "buffer", "usize"], result: "i32" },
  cublasLtMatrixLayoutCreate: { parameters: ["buffer", "i32", "u64", "u64", "i64"], result: "i32" },
  cublasLtMatrixLayoutDestroy: { parameters: ["pointer"], result: "i32" },
  cublasLtMatrixLayoutSetAttribute: { parameters: ["pointer", "i32", "buffer", "usize"], result: "i32" },
  cublasLtMatmulPreferenceCreate: { parameters: ["buffer"], result: "i32" },
  cublasLtMatmulPreferenceDestroy: { parameters: ["pointer"], result: "i32" },
  cublasLtMatmulPreferenceSetAttribute: { parameters: ["pointer", "i32", "buffer", "usize"], result: "i32" },
  cublasLtMatmulAlgoGetHeuristic: {
    parameters: [
      "pointer",
      "pointer",
      "pointer",
      "pointer",
      "pointer",
      "pointer",
      "pointer",
      "i32",
      "buffer",
      "buffer",
    ],
    result: "i32",
  },
  cublasLtMatmul: {
    parameters: [
      "pointer", // handle
      "pointer", // computeDesc
      "buffer", // alpha (host)
      "u64", // A
      "pointer", // Adesc
      "u64", // B
      "pointer", // Bdesc
      "buffer", // beta (host)
      "u64", // C
      "pointer", // Cdesc
      "u64", // D
      "pointer", // Ddesc
      "buffer", // algo
      "u64", // workspace
      "usize", // workspaceSizeInBytes
      "pointer", // stream
    ],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

// Enum values from cuBLAS's library_types.h / cublas_api.h / cublasLt.h.
const CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14;
const CUBLAS_COMPUTE_32F = 68;
const CUBLAS_OP_N = 0, CUBLAS_OP_T = 1;
const DESC_TRANSA = 3, DESC_TRANSB = 4, DESC_EPILOGUE = 7, DESC_BIAS_POINTER = 8;
// cublasLtMatmulDescAttributes_t: BIAS_BATCH_STRIDE (int64_t elements, default 0: one vector for every
// batch entry), BIAS_DATA_TYPE (int32_t cudaDataType, default -1: D's type).
const DESC_BIAS_BATCH_STRIDE = 10, DESC_BIAS_DATA_TYPE = 26;
const LAYOUT_BATCH_COUNT = 5, LAYOUT_STRIDED_BATCH_OFFSET = 6;
const PREF_MAX_WORKSPACE_BYTES = 1;
// cublasLtMatmulPreferenceAttributes_t: MIN_ALIGNMENT_{A,B,C,D}_BYTES (uint32_t, default 256). The
// heuristic only returns algorithms that work with pointers aligned this much, so they are set to the
// alignment the pointers really have (cuBLASLt docs, "cublasLtMatmulPreferenceAttributes_t").
const PREF_MIN_ALIGNMENT = { a: 5, b: 6, c: 7, d: 8 } as const;
// cublasLtEpilogue_t: DEFAULT 1, BIAS 4, BGRADA 256, BGRADB 512 (cublasLt.h).
const EPILOGUE = {
  none: 1,
  bias: 4,
  bgrada: 256,
  bgradb: 512,
} as const;
const HEURISTIC_RESULT_BYTES = 96;
const HEURISTIC_STATE_OFFSET = 72;

export type GemmDType = "f32" | "f16" | "bf16";

const DATA_TYPE: Record<GemmDType, number> = { f32: CUDA_R_32F, f16: CUDA_R_16F, bf16: CUDA_R_16BF };

const i32 = (v: number) => new Uint8Array(new Int32Array([v]).buffer);
const i64 = (v: number) => new Uint8Array(new BigInt64Array([BigInt(v)]).buffer);
const u64 = (v: bigint) => new Uint8Array(new BigUint64Array([v]).buffer);

export class CublasLt {
  private constructor(
    private readonly lib: Deno.DynamicLibrary<typeof CUBLASLT_SYMBOLS>,
    readonly path: string,
    readonly handle: Pointer,
    readonly driver: CudaDriver,
    /** Device workspace for the algorithms that want one. */
    readonly workspace: DevicePtr,
    readonly workspaceBytes: number,
  ) {}

  static open(driver: CudaDriver, opts: DiscoverOptions & { workspaceBytes?: number } = {}): CublasLt {
    const { lib, path } = openDiscovered(discover("cublasLt", opts), CUBLASLT_SYMBOLS);
    const out = new BigUint64Array(1);
    const status = lib.symbols.cublasLtCreate(out);
    if (status !== 0) {
      lib.close();
      throw new CudaError(`cublasLtCreate failed with status ${status} (${path})`);
    }
    // 32 MiB: what cuBLAS itself uses on Hopper by default.
    const workspaceBytes = opts.workspaceBytes ?? 32 << 20;
    const workspace = driver.alloc(workspaceBytes, "cuBLASLt workspace");
    return new CublasLt(lib, path, Deno.UnsafePointer.create(out[0]), driver, workspace, workspaceBytes);
  }

  get symbols(): Deno.DynamicLibrary<typeof CUBLASLT_SYMBOLS>["symbols"] {
    return this.lib.symbols;
  }

  get version(): number {
    return Number(this.lib.symbols.cublasLtGetVersion());
  }

  check(call: string, status: number, what: string): void {
    if (status === 0) return;
    const f = this.lib.symbols.cublasLtGetStatusName;
    const p = f ? f(status) : null;
    const name = p ? Deno.UnsafePointerView.getCString(p) : "CUBLAS_STATUS";
    throw new CudaError(`${call} failed with ${name} (${status}) (${what})`);
  }

  close(): void {
    this.lib.symbols.cublasLtDestroy(this.handle);
    try {
      this.driver.free(this.workspace);
    } finally {
      this.lib.close();
    }
  }
}

/** One matrix of a library GEMM as the plan describes it (plan/plan.ts PlanGemmOperand). */
export interface LtOperand {
  readonly dtype: GemmDType;
  readonly ld: number;
  readonly trans: boolean;
  readonly batchStride: number;
  /** Elements between batch groups (with the spec's `outer`). */
  readonly outerStride?: number;
}

/**
 * A plan GEMM's epilogue without its buffer (plan/plan.ts PlanGemmEpilogue): "bias" adds a vector over
 * our D's columns, which are the rows of the library's column-major Dᵀ: CUBLASLT_EPILOGUE_BIAS's
 * vector, whose length "must match matrix D rows" (cublasLt.h), is exactly ours. "bgrad" writes the sums
 * over k of our operand A or B to the vector: BGRADB or BGRADA (lt_mapping.ts ltEpilogue).
 */
export type LtEpilogue = {
  readonly kind: "bias" | "bgrad";
  readonly operand?: "a" | "b";
  readonly bias: { readonly dtype: GemmDType; readonly batchStride: number };
};

/** A plan's GEMM (plan/plan.ts PlanGemm) without its buffers, plus the pointers' alignments in bytes. */
export interface LtCallSpec {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  /** Every batch entry; with `outer`, that many groups of batch/outer, one cublasLtMatmul each. */
  readonly batch: number;
  readonly outer?: number;
  readonly a: LtOperand;
  readonly b: LtOperand;
  readonly d: LtOperand;
  /** C, read with beta 1 (plan/plan.ts PlanGemm.c): laid out and typed as D. Absent: beta 0. */
  readonly c?: LtOperand;
  readonly epilogue?: LtEpilogue;
  /** `bias`: the bias pointer's alignment (with an epilogue); `c`: C's (with C). */
  readonly align: {
    readonly a: number;
    readonly b: number;
    readonly d: number;
    readonly c?: number;
    readonly bias?: number;
  };
}

/** The largest power of two (at most 256) that divides a device address. */
export function alignmentOf(p: DevicePtr): number {
  let a = 1;
  while (a < 256 && p % BigInt(a * 2) === 0n) a *= 2;
  return a;
}

/** The alignment every group's pointer of a call in groups keeps: the base's and the step's, whichever is less. */
export function groupAlignmentOf(p: DevicePtr, o: LtOperand, outer = 1): number {
  const step = BigInt((o.outerStride ?? 0) * (o.dtype === "f32" ? 4 : 2));
  return outer > 1 && step !== 0n ? Math.min(alignmentOf(p), alignmentOf(step)) : alignmentOf(p);
}

/**
 * A plan GEMM ready to run: descriptors made and an algorithm chosen by cuBLASLt's heuristic once; the
 * executor keeps one per distinct spec (same sizes, layouts, types and alignments) and runs it with each
 * step's pointers. Row-major to column-major as in the file comment: D (m×n, ld) is the column-major
 * n×m Dᵀ = op(B)ᵀ·op(A)ᵀ, so our B is the library's "A" and our A its "B". A row-major X stored with
 * leading dimension ld is the column-major Xᵀ with the same ld: untransposed B (k×n) is the library's
 * n×k "A" as is (OP_N), transposed B (stored n×k) is its k×n view used transposed (OP_T); likewise A.
 * Batches: BATCH_COUNT and STRIDED_BATCH_OFFSET (elements) on every layout (cuBLASLt docs,
 * "cublasLtMatrixLayoutAttribute_t"). Without the spec's `c`, C is D with beta 0 (not read); with it, C
 * is that buffer with its own layout (D's shape and type) and beta 1: D = op(A)·op(B) + C.
 */
export class LtCall {
  private readonly desc: Pointer;
  private readonly layouts: Pointer[] = [];
  private readonly algo = new Uint8Array(HEURISTIC_RESULT_BYTES);
  private readonly alpha = new Uint8Array(new Float32Array([1]).buffer);
  private readonly beta: Uint8Array<ArrayBuffer>;
  private readonly libA: Pointer;
  private readonly libB: Pointer;
  private readonly d: Pointer;
  /** C's layout: its own with the spec's `c`, else D's. */
  private readonly c: Pointer;
  /** The bias pointer the descriptor holds now (calls sharing this LtCall have their own biases). */
  private readonly biasSlot = new BigUint64Array(1);

  constructor(private readonly lt: CublasLt, readonly spec: LtCallSpec, readonly what: string) {
    const s = lt.symbols;
    const { m, n, k } = spec;
    // Groups share one set of layouts (batch/outer strided entries each); run() steps the pointers.
    const batch = spec.batch / (spec.outer ?? 1);
    const out = new BigUint64Array(1);
    const ptr = () => Deno.UnsafePointer.create(out[0]);
    // f32 accumulation and f32 alpha/beta whatever the operand types (the template's numerics).
    lt.check(
      "cublasLtMatmulDescCreate",
      s.cublasLtMatmulDescCreate(out, CUBLAS_COMPUTE_32F, CUDA_R_32F),
      what,
    );
    this.desc = ptr();
    try {
      const setDesc = (attr: number, buf: Uint8Array<ArrayBuffer>, name: string) =>
        this.setDesc(attr, buf, name, what);
      // The row-major to column-major mapping (lt_mapping.ts; the CPU shim runs the same descriptors).
      const lib = ltDescriptors(spec);
      this.beta = new Uint8Array(new Float32Array([lib.beta]).buffer);
      setDesc(DESC_TRANSA, i32(lib.transA ? CUBLAS_OP_T : CUBLAS_OP_N), "TRANSA");
      setDesc(DESC_TRANSB, i32(lib.transB ? CUBLAS_OP_T : CUBLAS_OP_N), "TRANSB");
      // BIAS, or a bias gradient as BGRADA / BGRADB (LtCall passes our B as the library's A).
      setDesc(DESC_EPILOGUE, i32(EPILOGUE[lib.bias?.kind ?? "none"]), "EPILOGUE");
      if (lib.bias) {
        setDesc(DESC_BIAS_DATA_TYPE, i32(DATA_TYPE[lib.bias!.dtype]), "BIAS_DATA_TYPE");
        if (lib.bias!.batchStride !== 0) {
          setDesc(DESC_BIAS_BATCH_STRIDE, i64(lib.bias!.batchStride), "BIAS_BATCH_STRIDE");
        }
        // The heuristic reads the bias pointer only for its alignment (cublasLt.h): a stand-in address
        // with the real one's alignment until run() sets each call's own. BIAS_DATA_TYPE is also the type
        // a bias gradient is stored in ("type of the bias or bias gradient vector", cublasLt.h).
        this.biasSlot[0] = BigInt(spec.align.bias ?? 256);
        setDesc(DESC_BIAS_POINTER, new Uint8Array(this.biasSlot.buffer), "BIAS_POINTER");
      }
      const layout = (op: LtLayout, name: string) => {
        lt.check(
          `cublasLtMatrixLayoutCreate(${name})`,
          s.cublasLtMatrixLayoutCreate(
            out,
            DATA_TYPE[op.dtype],
            BigInt(op.rows),
            BigInt(op.cols),
            BigInt(op.ld),
          ),
          what,
        );
        const l = ptr();
        this.layouts.push(l);
        if (batch > 1) {
          lt.check(
            `cublasLtMatrixLayoutSetAttribute(${name}, BATCH_COUNT)`,
            s.cublasLtMatrixLayoutSetAttribute(l, LAYOUT_BATCH_COUNT, i32(batch), 4n),
            what,
          );
          lt.check(
            `cublasLtMatrixLayoutSetAttribute(${name}, STRIDED_BATCH_OFFSET)`,
            s.cublasLtMatrixLayoutSetAttribute(l, LAYOUT_STRIDED_BATCH_OFFSET, i64(op.stride), 8n),
            what,
          );
        }
        return l;
      };
      this.libA = layout(lib.a, "B");
      this.libB = layout(lib.b, "A");
      this.d = layout(lib.d, "D");
      this.c = lib.c ? layout(lib.c, "C") : this.d;
      lt.check("cublasLtMatmulPreferenceCreate", s.cublasLtMatmulPreferenceCreate(out), what);
      const pref = ptr();
      try {
        const setPref = (attr: number, buf: Uint8Array<ArrayBuffer>, name: string) =>
          lt.check(
            `cublasLtMatmulPreferenceSetAttribute(${name})`,
            s.cublasLtMatmulPreferenceSetAttribute(pref, attr, buf, BigInt(buf.byteLength)),
            what,
          );
        setPref(PREF_MAX_WORKSPACE_BYTES, u64(BigInt(lt.workspaceBytes)), "MAX_WORKSPACE_BYTES");
        const u32 = (v: number) => new Uint8Array(new Uint32Array([v]).buffer);
        // Library A is our B, library B our A.
        setPref(PREF_MIN_ALIGNMENT.a, u32(spec.align.b), "MIN_ALIGNMENT_A_BYTES");
        setPref(PREF_MIN_ALIGNMENT.b, u32(spec.align.a), "MIN_ALIGNMENT_B_BYTES");
        setPref(
          PREF_MIN_ALIGNMENT.c,
          u32(spec.c ? spec.align.c ?? 1 : spec.align.d),
          "MIN_ALIGNMENT_C_BYTES",
        );
        setPref(PREF_MIN_ALIGNMENT.d, u32(spec.align.d), "MIN_ALIGNMENT_D_BYTES");
        const count = new Int32Array(1);
        lt.check(
          "cublasLtMatmulAlgoGetHeuristic",
          s.cublasLtMatmulAlgoGetHeuristic(
            lt.handle,
            this.desc,
            this.libA,
            this.libB,
            this.c,
            this.d,
            pref,
            1,
            this.algo,
            count,
          ),
          what,
        );
        const state = new DataView(this.algo.buffer).getInt32(HEURISTIC_STATE_OFFSET, true);
        if (count[0] < 1 || state !== 0) {
          throw new CudaError(
            `cuBLASLt has no algorithm for ${what} (m ${m}, n ${n}, k ${k}, batch ${batch}, ` +
              `${spec.a.dtype} -> ${spec.d.dtype}${
                spec.epilogue ? `, ${lib.bias!.kind.toUpperCase()} epilogue` : ""
              }${spec.c ? ", C with beta 1" : ""})`,
          );
        }
      } finally {
        s.cublasLtMatmulPreferenceDestroy(pref);
      }
    } catch (e) {
      this.destroy();
      throw e;
    }
  }

  private setDesc(attr: number, buf: Uint8Array<ArrayBuffer>, name: string, what: string): void {
    this.lt.check(
      `cublasLtMatmulDescSetAttribute(${name})`,
      this.lt.symbols.cublasLtMatmulDescSetAttribute(this.desc, attr, buf, BigInt(buf.byteLength)),
      what,
    );
  }

  /**
   * Enqueues D = op(A)·op(B) (+ C, + bias) on `stream` (capturable: the workspace is given, nothing is
   * allocated; the bias pointer is a host-side descriptor value, read when each call is enqueued). `c`:
   * C's pointer, for a spec with C.
   */
  run(
    a: DevicePtr,
    b: DevicePtr,
    d: DevicePtr,
    stream: Pointer,
    what = this.what,
    bias?: DevicePtr,
    c?: DevicePtr,
  ): void {
    const { lt, spec } = this;
    if ((c === undefined) !== (spec.c === undefined)) {
      throw new CudaError(
        `${what}: C's pointer ${c === undefined ? "is missing" : "is given to a call without C"}`,
      );
    }
    const kind = spec.epilogue?.kind;
    if (kind !== undefined) {
      if (bias === undefined) throw new CudaError(`${what}: the ${kind} epilogue needs its vector`);
      if (this.biasSlot[0] !== bias) {
        this.biasSlot[0] = bias;
        this.setDesc(DESC_BIAS_POINTER, new Uint8Array(this.biasSlot.buffer), "BIAS_POINTER", what);
      }
    }
    // A call in groups (plan/plan.ts PlanGemm.outer): one cublasLtMatmul per group, pointers stepped by
    // each operand's outerStride (elements, times its element size).
    const step = (o: LtOperand, g: number) => BigInt(g * (o.outerStride ?? 0) * (o.dtype === "f32" ? 4 : 2));
    for (let g = 0; g < (spec.outer ?? 1); g++) {
      const ga = a + step(spec.a, g), gb = b + step(spec.b, g), gd = d + step(spec.d, g);
      const gc = c === undefined ? gd : c + step(spec.c!, g);
      lt.check(
        "cublasLtMatmul",
        lt.symbols.cublasLtMatmul(
          lt.handle,
          this.desc,
          this.alpha,
          gb,
          this.libA,
          ga,
          this.libB,
          this.beta,
          gc,
          this.c,
          gd,
          this.d,
          this.algo,
          lt.workspace,
          BigInt(lt.workspaceBytes),
          stream,
        ),
        what,
      );
    }
  }

  destroy(): void {
    for (const l of this.layouts.splice(0)) this.lt.symbols.cublasLtMatrixLayoutDestroy(l);
    if (this.desc) this.lt.symbols.cublasLtMatmulDescDestroy(this.desc);
  }
}
