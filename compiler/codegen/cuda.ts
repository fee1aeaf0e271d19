/**
 * The CUDA C emitter: kernel IR -> CUDA C++ device code for NVRTC (or `nvcc -c`). It runs the CUDA legalize
 * rules (legalize_cuda.ts) and then only spells: one IR statement per line, the kernel's `about` lines as
 * a comment header, the prelude helpers the kernel uses (cuda_prelude.ts). Output is a pure function of
 * the kernel: byte-identical run to run, and kernels that differ only in name (the same fusion in every
 * layer) have the same source. The ABI contract with runtime/cuda/ (`bf_kernel`, one pointer per binding)
 * and the numerics: DESIGN.md, notes: compiler/codegen/cuda.ts.
 */
import type { TargetKernel } from "../../plan/plan.ts";
import { isVector, type Kernel, type KStmt, type KType, type KUnOp, laneType } from "../kernel_ir/ir.ts";
import { visitStmts } from "../kernel_ir/walk.ts";
import { atom, call, negate, not, reciprocal, type Spelled, type ThreadId } from "./c_family.ts";
import {
  HalfInF32Speller,
  isFloat,
  isHalf,
  shortestF32,
  signedFloat,
  type UnarySpelling,
} from "./c_halves.ts";
import { type CudaLegal, legalizeCUDA, WARP } from "./legalize_cuda.ts";
import { CudaNamer } from "./cuda_names.ts";
import {
  blockReduceName,
  type CudaHelper,
  cudaPrelude,
  type ReduceHelper,
  warpReduceName,
} from "./cuda_prelude.ts";

export class CudaEmitError extends Error {
  override name = "CudaEmitError";
}

/** Legalizes and spells `k`; `grid` is the block grid the runtime launches (see the contract above). */
export function emitCUDA(k: Kernel): TargetKernel {
  const legal = legalizeCUDA(k);
  return { code: new Speller(legal).kernel(), grid: legal.grid, workgroupSize: legal.kernel.workgroupSize };
}

const C_TYPE: Record<string, string> = {
  f32: "float",
  f16: "__half",
  bf16: "__nv_bfloat16",
  i32: "int",
  u32: "unsigned int",
  bool: "bool",
  v4f32: "float4",
  v4i32: "int4",
  v4u32: "uint4",
  v4f16: "bf_half4",
};
const MAKE_VECTOR: Record<string, string> = {
  v4f32: "make_float4",
  v4i32: "make_int4",
  v4u32: "make_uint4",
  v4f16: "bf_make_half4",
};

function floatLiteral(v: number): Spelled {
  const r = Math.fround(v);
  if (Number.isNaN(r)) return atom("__uint_as_float(0x7fc00000u)");
  if (!Number.isFinite(r)) {
    return atom(r > 0 ? "__uint_as_float(0x7f800000u)" : "__uint_as_float(0xff800000u)");
  }
  return signedFloat(r, shortestF32(Math.abs(r)) + "f");
}

/**
 * How CUDA spells each unary op: on floats in f32 (halves are widened before and rounded after, see the
 * file comment), on integers and bool as they are; an op without a spelling for a type is refused.
 */
const SPELL_UNARY: Record<KUnOp, UnarySpelling<CudaHelper>> = {
  neg: { float: (x) => negate(x, false), int: (a, t) => negate(a, t === "u32") },
  abs: { float: call("fabsf"), int: (a, t) => (t === "u32" ? a : call("abs")(a)) },
  exp: { float: call("expf") },
  log: { float: call("logf") },
  sqrt: { float: call("sqrtf") },
  rsqrt: { float: call("rsqrtf") },
  tanh: { float: call("tanhf") },
  erf: { float: call("bf_erf"), helpers: ["bf_erf"] },
  reciprocal: { float: (x) => reciprocal(x, "1.0f") },
  not: { int: (a, t) => not(a, t === "bool") },
};

type Reduce = Extract<KStmt, { k: "wg_reduce" }>;

class Speller extends HalfInF32Speller<CudaHelper> {
  protected readonly unarySpellings = SPELL_UNARY;
  private readonly names = new CudaNamer();
  private readonly reductions = new Map<string, ReduceHelper>();
  private fp16 = false;
  private bf16 = false;
  protected readonly barrier = "__syncthreads();";
  protected readonly floatLiteral = floatLiteral;
  protected readonly builtins = { lid: "threadIdx.x", x: "blockIdx.x", y: "blockIdx.y" };

  constructor(private readonly cuda: CudaLegal) {
    super(cuda);
  }

  protected error(msg: string): Error {
    return new CudaEmitError(msg);
  }

  /** The C++ name of a kernel-IR type (noting the header it needs). */
  protected type(t: KType): string {
    const name = C_TYPE[t] ?? this.fail(`no CUDA type for ${t}`);
    if (laneType(t) === "f16") this.fp16 = true;
    if (t === "bf16") this.bf16 = true;
    if (t === "v4f16") this.helpers.add("bf_half4");
    return name;
  }

  kernel(): string {
    const k = this.k;
    const header = k.about.flatMap((a) => a.split("\n")).map((a) => `// ${a}`);
    const [gx, gy, gz] = this.legal.grid;
    header.push(
      `// launch: grid [${gx}, ${gy}, ${gz}] of ${k.workgroupSize}-thread blocks` +
        (gy > 1 ? ` (linear block id = x + y * ${gx}, ${k.workgroups} blocks)` : ""),
    );
    if (this.cuda.clampedLoads) {
      header.push(
        `// bounds: ${this.cuda.clampedLoads} load index(es) clamped into their array (not provably in range)`,
      );
    }
    const params = k.bindings.map((b) => {
      const t = this.type(b.t);
      return `${b.access === "read" ? "const " : ""}${t}* __restrict__ ${this.names.name(b.name, "binding")}`;
    });
    const shared = k.shared.map((s) =>
      `  __shared__ ${this.type(s.t)} ${this.names.name(s.name, "shared")}[${s.size}];`
    );

    // The body is spelled first: it decides which helpers, headers and ids are needed.
    const { lines } = this.body();

    const parts: string[] = [header.join("\n")];
    const includes: string[] = [];
    if (this.fp16) includes.push("#include <cuda_fp16.h>");
    if (this.bf16) includes.push("#include <cuda_bf16.h>");
    if (includes.length) parts.push(includes.join("\n"));
    const prelude = cudaPrelude({
      helpers: this.helpers,
      reductions: this.reductions,
      warpWidth: this.cuda.warpWidth,
      warps: Math.max(1, k.workgroupSize / WARP),
    });
    if (prelude) parts.push(prelude);
    parts.push(
      [
        `extern "C" __global__ void __launch_bounds__(${k.workgroupSize}) bf_kernel(${params.join(", ")}) {`,
        ...shared,
        ...lines,
        "}",
      ].join("\n"),
    );
    return parts.join("\n\n") + "\n";
  }

  /** A reduction reads lid to pick its warp's slot. */
  protected override moreIds(ids: Set<ThreadId>): void {
    visitStmts(this.k.body, (s) => {
      if (s.k === "wg_reduce" && this.cuda.scratch.has(s.out)) ids.add("lid");
    });
  }

  /**
   * A group of wg_reduce: each value is reduced within its warp by a butterfly; with more than one warp,
   * lane 0 of each warp writes its warp's result to the reduction's slot array, one barrier, and every
   * thread folds the slots left to right. Same inputs, same order, same bits.
   */
  protected reduceGroup(group: readonly Reduce[]): void {
    const warps = Math.max(1, this.k.workgroupSize / WARP);
    const what = group.map((r) => `${r.op} -> ${r.out}`).join(", ");
    this.line(
      `// wg_reduce (${what}): butterfly within each warp` +
        (warps > 1 ? `, then the ${warps} warp results in order` : ""),
    );
    const partial: string[] = [];
    for (const r of group) {
      if (isVector(r.t)) this.fail(`wg_reduce of ${r.t} survived legalization (internal error)`);
      const helper = this.reduceHelper(r);
      const v = this.expr(r.value);
      if (r.value.t !== r.t) this.fail(`wg_reduce of a ${r.value.t} value as ${r.t}`);
      const name = warps > 1 ? this.names.temp("warp") : this.names.name(r.out);
      this.line(
        `const ${this.type(r.t)} ${name} = ${warpReduceName(helper, this.cuda.warpWidth)}(${v.s});`,
      );
      partial.push(name);
    }
    if (warps === 1) return;
    const slot = (r: Reduce) =>
      this.names.name(
        this.cuda.scratch.get(r.out) ?? this.fail(`wg_reduce ${r.out} has no slots`),
        "shared",
      );
    this.line(`if ((lid & ${WARP - 1}) == 0) {`);
    group.forEach((r, i) => this.line(`  ${slot(r)}[lid / ${WARP}] = ${partial[i]};`));
    this.line("}");
    this.line("__syncthreads();");
    for (const r of group) {
      const fold = blockReduceName(this.reduceHelper(r), warps);
      this.line(`const ${this.type(r.t)} ${this.names.name(r.out)} = ${fold}(${slot(r)});`);
    }
  }

  private reduceHelper(r: Reduce): ReduceHelper {
    const type = this.type(r.t);
    if (isHalf(r.t) || r.t === "bool") this.fail(`wg_reduce of ${r.t}`);
    const combine = r.op === "sum" ? "a + b" : r.t === "f32" ? "fmaxf(a, b)" : "max(a, b)";
    const key = `${r.op}:${type}`;
    if (!this.reductions.has(key)) this.reductions.set(key, { op: r.op, type, combine });
    return this.reductions.get(key)!;
  }

  // ---- the C-family hooks -------------------------------------------------------------------------

  protected local(name: string): string {
    return this.names.name(name);
  }

  protected sharedName(name: string): string {
    return this.names.name(name, "shared");
  }

  /** The spelled binding: as is, or reinterpreted as an array of its vector type. */
  protected bufferAccess(buf: string, t: KType, read: boolean): string {
    const name = this.names.name(buf, "binding");
    if (!isVector(t)) return name;
    const c = read && this.readOnly.has(buf) ? "const " : "";
    return `reinterpret_cast<${c}${this.type(t)}*>(${name})`;
  }

  protected declaration(name: string, t: KType, mutable: boolean): string {
    return `${mutable ? "" : "const "}${this.type(t)} ${this.names.name(name)}`;
  }

  protected toInt(x: string): string {
    return `static_cast<int>(${x})`;
  }

  protected convert(a: Spelled, type: string): Spelled {
    return atom(`static_cast<${type}>(${a.s})`);
  }

  /** Round toward zero like the reference's truncation; out of range saturates, NaN gives 0. */
  protected truncate(x: Spelled, to: KType): Spelled {
    return atom(`${to === "u32" ? "__float2uint_rz" : "__float2int_rz"}(${x.s})`);
  }

  protected vector(t: KType, parts: readonly string[]): Spelled {
    const make = MAKE_VECTOR[t] ?? this.fail(`no CUDA vector type for ${t}`);
    this.type(t);
    return atom(`${make}(${parts.join(", ")})`);
  }

  protected minMax(op: "max" | "min", t: KType): string {
    return isFloat(t) ? (op === "max" ? "fmaxf" : "fminf") : op;
  }

  protected toF32(a: Spelled, t: KType): Spelled {
    if (t === "f16") {
      this.fp16 = true;
      return atom(`__half2float(${a.s})`);
    }
    if (t === "bf16") {
      this.bf16 = true;
      return atom(`__bfloat162float(${a.s})`);
    }
    return a;
  }

  protected fromF32(a: Spelled, t: KType): Spelled {
    if (t === "f16") {
      this.fp16 = true;
      return atom(`__float2half_rn(${a.s})`);
    }
    if (t === "bf16") {
      this.bf16 = true;
      return atom(`__float2bfloat16_rn(${a.s})`);
    }
    return a;
  }
}
