/**
 * The CUDA C emitter: kernel IR -> CUDA C++ device code for NVRTC (or `nvcc -c`). It runs the CUDA legalize
 * rules (legalize_cuda.ts) and then only spells: one IR statement per line, the kernel's `about` lines as
 * a comment header, the prelude helpers the kernel uses (cuda_prelude.ts). Output is a pure function of
 * the kernel, so it is byte-identical run to run, and kernels that differ only in name (the same fusion
 * in every layer) have the same source.
 *
 * ABI contract with the CUDA runtime (runtime/cuda/):
 *
 *   extern "C" __global__ void __launch_bounds__(WG) bf_kernel(T0* __restrict__ b0, const T1* __restrict__ b1, ...)
 *
 *   - The entry point is always `bf_kernel`, with C linkage (cuModuleGetFunction(&f, module, "bf_kernel")).
 *   - Exactly one pointer parameter per kernel binding, in binding-index order (PlanKernel.bindings), and
 *     no other parameters; read-only bindings are `const`. No dynamic shared memory (sharedMemBytes = 0).
 *   - Element types: f32 float, i32 int, u32 unsigned int, bool as unsigned int (4 bytes, 0 or 1, as on
 *     WGSL), f16 __half and bf16 __nv_bfloat16 (2 bytes each).
 *   - Launch grid = TargetKernel.grid ([x, y, z] blocks), block = (TargetKernel.workgroupSize, 1, 1).
 *     A grid with a zero dimension has no work and must be skipped (cuLaunchKernel rejects it).
 *   - Source: CUDA C++17 for NVRTC; it includes only cuda_fp16.h / cuda_bf16.h, and only when it uses
 *     them (pass the toolkit's include folder with -I where NVRTC lacks them built in).
 *   - A binding marked `vector` is read and written 4 elements at a time (float4/int4/uint4: 16 bytes;
 *     f16: 8 bytes): its pointer must be aligned to that size.
 *   - Bindings of one launch never overlap (the memory plan never puts two buffers of one step in one slot),
 *     which is what `__restrict__` promises.
 *   - Every index the kernel reads is within its binding's `elements` (loads the IR cannot prove in range
 *     are clamped), so the runtime needs no guard pages.
 *
 * Numerics: f32 arithmetic is IEEE (nvcc/NVRTC defaults: -prec-div, -prec-sqrt), except that a*b+c may
 * contract to one fused multiply-add (--fmad=true, the default; pass --fmad=false for bit-comparisons with
 * the reference interpreter). f16/bf16 values are computed in f32 and rounded back after each operation,
 * which for + - * / sqrt gives exactly the half-precision result (24 >= 2·11 + 2 bits). erf is the WGSL
 * prelude's polynomial; exp, log, sqrt, rsqrt, tanh are expf, logf, sqrtf, rsqrtf, tanhf.
 */
import type { TargetKernel } from "../../plan/plan.ts";
import { isVector, type Kernel, type KExpr, type KStmt, type KType, laneType } from "../kernel_ir/ir.ts";
import { visitExprs, visitStmts } from "../kernel_ir/walk.ts";
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

// Precedence levels of spelled C++ expressions; parentheses are added where the grammar needs them or
// where mixing would make a reader stop and think (bitwise operators against comparisons, always).
const ATOM = 100, UNARY = 90, MUL = 80, ADD = 70, REL = 50, BIT = 40, AND = 30, OR = 20;

interface Spelled {
  readonly s: string;
  readonly p: number;
  /** The operator at the top, for chains C++ reads without parentheses (a && b && c). */
  readonly op?: string;
}

const atom = (s: string): Spelled => ({ s, p: ATOM });
const paren = (x: Spelled, need: boolean) => (need ? `(${x.s})` : x.s);

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

const isHalf = (t: KType) => t === "f16" || t === "bf16";
const isFloat = (t: KType) => t === "f32" || isHalf(t);

/** The shortest decimal that C++ reads back as exactly the f32 `v` (see floatLiteral). */
function shortestF32(v: number): string {
  for (let digits = 1; digits <= 9; digits++) {
    const text = v.toPrecision(digits);
    const d = Number(text);
    // The C++ parser rounds the decimal to float directly; going through the double `d` agrees with it
    // unless `d` itself sits exactly halfway between two floats, which the second test rules out.
    if (Math.fround(d) === v && !isF32Midpoint(d)) {
      const s = String(d);
      return /[.e]/.test(s) ? s : `${s}.0`;
    }
  }
  return String(v);
}

/** Whether the double `d` lies exactly halfway between two adjacent f32 values. */
function isF32Midpoint(d: number): boolean {
  const f = Math.fround(d);
  if (f === d || !Number.isFinite(f)) return false;
  const buf = new DataView(new ArrayBuffer(4));
  buf.setFloat32(0, f);
  const bits = buf.getUint32(0);
  buf.setUint32(0, d > f === f > 0 ? bits + 1 : bits - 1);
  const other = buf.getFloat32(0);
  return (f + other) / 2 === d;
}

function floatLiteral(v: number): Spelled {
  const r = Math.fround(v);
  if (Number.isNaN(r)) return atom("__uint_as_float(0x7fc00000u)");
  if (!Number.isFinite(r)) {
    return atom(r > 0 ? "__uint_as_float(0x7f800000u)" : "__uint_as_float(0xff800000u)");
  }
  const text = shortestF32(Math.abs(r)) + "f";
  return r < 0 || Object.is(r, -0) ? { s: `-${text}`, p: UNARY } : atom(text);
}

const BIN_OPS: Partial<Record<string, { sym: string; p: number }>> = {
  add: { sym: "+", p: ADD },
  sub: { sym: "-", p: ADD },
  mul: { sym: "*", p: MUL },
  div: { sym: "/", p: MUL },
  mod: { sym: "%", p: MUL },
  eq: { sym: "==", p: REL },
  ne: { sym: "!=", p: REL },
  lt: { sym: "<", p: REL },
  le: { sym: "<=", p: REL },
  gt: { sym: ">", p: REL },
  ge: { sym: ">=", p: REL },
};

const F32_MATH: Record<string, string> = {
  exp: "expf",
  log: "logf",
  sqrt: "sqrtf",
  rsqrt: "rsqrtf",
  tanh: "tanhf",
  abs: "fabsf",
  erf: "bf_erf",
};

type Reduce = Extract<KStmt, { k: "wg_reduce" }>;

class Speller {
  private readonly k: Kernel;
  private readonly names = new CudaNamer();
  private readonly helpers = new Set<CudaHelper>();
  private readonly reductions = new Map<string, ReduceHelper>();
  private readonly bindingType = new Map<string, KType>();
  private readonly bindingConst = new Set<string>();
  private readonly sharedType = new Map<string, KType>();
  private readonly lines: string[] = [];
  private depth = 1;
  private fp16 = false;
  private bf16 = false;

  constructor(private readonly legal: CudaLegal) {
    this.k = legal.kernel;
    for (const b of this.k.bindings) {
      this.bindingType.set(b.name, b.vector ? `v4${b.t}` as KType : b.t);
      if (b.access === "read") this.bindingConst.add(b.name);
    }
    for (const s of this.k.shared) this.sharedType.set(s.name, s.t);
  }

  private fail(msg: string): never {
    throw new CudaEmitError(`kernel ${this.k.name}: ${msg}`);
  }

  /** The C++ name of a kernel-IR type (noting the header it needs). */
  private type(t: KType): string {
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
    if (this.legal.clampedLoads) {
      header.push(
        `// bounds: ${this.legal.clampedLoads} load index(es) clamped into their array (not provably in range)`,
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
    const ids = this.usedIds();
    this.prologue(ids);
    this.block(k.body);

    const parts: string[] = [header.join("\n")];
    const includes: string[] = [];
    if (this.fp16) includes.push("#include <cuda_fp16.h>");
    if (this.bf16) includes.push("#include <cuda_bf16.h>");
    if (includes.length) parts.push(includes.join("\n"));
    const prelude = cudaPrelude({
      helpers: this.helpers,
      reductions: this.reductions,
      warpWidth: this.legal.warpWidth,
      warps: Math.max(1, k.workgroupSize / WARP),
    });
    if (prelude) parts.push(prelude);
    parts.push(
      [
        `extern "C" __global__ void __launch_bounds__(${k.workgroupSize}) bf_kernel(${params.join(", ")}) {`,
        ...shared,
        ...this.lines,
        "}",
      ].join("\n"),
    );
    return parts.join("\n\n") + "\n";
  }

  /** Which thread ids the body (and the grid guard, and wg_reduce) reads; gid implies lid and wg. */
  private usedIds(): Set<"lid" | "wg" | "gid"> {
    const ids = new Set<"lid" | "wg" | "gid">();
    visitExprs(this.k.body, (e) => {
      if (e.k === "id") ids.add(e.which);
    });
    visitStmts(this.k.body, (s) => {
      if (s.k === "wg_reduce" && this.legal.scratch.has(s.out)) ids.add("lid");
    });
    if (this.legal.guard !== null) ids.add("wg");
    if (ids.has("gid")) {
      ids.add("lid");
      ids.add("wg");
    }
    return ids;
  }

  private prologue(ids: Set<string>): void {
    const [gx, gy] = this.legal.grid;
    if (ids.has("lid")) this.line("const int lid = static_cast<int>(threadIdx.x);");
    if (ids.has("wg")) {
      this.line(
        gy > 1
          ? `const int wg = static_cast<int>(blockIdx.x + blockIdx.y * ${gx}u);`
          : "const int wg = static_cast<int>(blockIdx.x);",
      );
    }
    if (this.legal.guard !== null) {
      // The block id is uniform across the block, so returning here is legal before barriers.
      this.line(`if (wg >= ${this.legal.guard}) {`);
      this.line("  return;");
      this.line("}");
    }
    if (ids.has("gid")) this.line(`const int gid = wg * ${this.k.workgroupSize} + lid;`);
  }

  private line(text: string): void {
    this.lines.push("  ".repeat(this.depth) + text);
  }

  private block(body: readonly KStmt[]): void {
    for (let i = 0; i < body.length; i++) {
      const s = body[i];
      if (s.k !== "wg_reduce") {
        this.stmt(s);
        continue;
      }
      // Adjacent reductions form one group sharing one barrier (legalize_cuda.ts, rule 4).
      const group: Reduce[] = [];
      while (i < body.length && body[i].k === "wg_reduce") group.push(body[i++] as Reduce);
      i--;
      this.reduceGroup(group);
    }
  }

  private nested(body: readonly KStmt[]): void {
    this.depth++;
    this.block(body);
    this.depth--;
  }

  private stmt(s: KStmt): void {
    switch (s.k) {
      case "let": {
        const init = this.expr(s.init);
        if (init.t !== s.t) this.fail(`let ${s.name}: ${s.t} initialized with a ${init.t} value`);
        this.line(`${s.mutable ? "" : "const "}${this.type(s.t)} ${this.names.name(s.name)} = ${init.x.s};`);
        return;
      }
      case "set":
        this.line(`${this.names.name(s.name)} = ${this.expr(s.value).x.s};`);
        return;
      case "store": {
        const t = this.bindingType.get(s.buf) ?? this.fail(`store to unknown binding ${s.buf}`);
        if (s.value.t !== t) this.fail(`store of a ${s.value.t} value into ${t} binding ${s.buf}`);
        if (this.bindingConst.has(s.buf)) this.fail(`store to read-only binding ${s.buf}`);
        const at = `${this.access(s.buf, t, false)}[${this.index(s.index)}]`;
        this.line(`${at} = ${this.expr(s.value).x.s};`);
        return;
      }
      case "sstore": {
        const t = this.sharedType.get(s.arr) ?? this.fail(`store to unknown shared array ${s.arr}`);
        if (s.value.t !== t) this.fail(`store of a ${s.value.t} value into ${t} shared array ${s.arr}`);
        this.line(`${this.names.name(s.arr, "shared")}[${this.index(s.index)}] = ${this.expr(s.value).x.s};`);
        return;
      }
      case "for": {
        const v = this.names.name(s.v);
        for (const e of [s.from, s.to, s.step]) if (e.t !== "i32") this.fail(`for bound of type ${e.t}`);
        const to = this.expr(s.to).x;
        this.line(
          `for (int ${v} = ${this.expr(s.from).x.s}; ${v} < ${paren(to, to.p <= REL)}; ${v} += ${
            this.expr(s.step).x.s
          }) {`,
        );
        this.nested(s.body);
        this.line("}");
        return;
      }
      case "if":
        if (s.cond.t !== "bool") this.fail(`if condition is ${s.cond.t}, not bool`);
        this.line(`if (${this.expr(s.cond).x.s}) {`);
        this.nested(s.then);
        if (s.else && s.else.length) {
          this.line("} else {");
          this.nested(s.else);
        }
        this.line("}");
        return;
      case "barrier":
        this.line("__syncthreads();");
        return;
      case "comment":
        for (const text of s.text.split("\n")) this.line(`// ${text}`);
        return;
      case "wg_reduce":
        return this.reduceGroup([s]);
    }
  }

  /**
   * A group of wg_reduce: each value is reduced within its warp by a butterfly; with more than one warp,
   * lane 0 of each warp writes its warp's result to the reduction's slot array, one barrier, and every
   * thread folds the slots left to right. Same inputs, same order, same bits.
   */
  private reduceGroup(group: readonly Reduce[]): void {
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
      if (v.t !== r.t) this.fail(`wg_reduce of a ${v.t} value as ${r.t}`);
      const name = warps > 1 ? this.names.temp("warp") : this.names.name(r.out);
      this.line(
        `const ${this.type(r.t)} ${name} = ${warpReduceName(helper, this.legal.warpWidth)}(${v.x.s});`,
      );
      partial.push(name);
    }
    if (warps === 1) return;
    const slot = (r: Reduce) =>
      this.names.name(
        this.legal.scratch.get(r.out) ?? this.fail(`wg_reduce ${r.out} has no slots`),
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

  /** The spelled binding: as is, or reinterpreted as an array of its vector type. */
  private access(buf: string, t: KType, read: boolean): string {
    const name = this.names.name(buf, "binding");
    if (!isVector(t)) return name;
    const c = read && this.bindingConst.has(buf) ? "const " : "";
    return `reinterpret_cast<${c}${this.type(t)}*>(${name})`;
  }

  private index(e: KExpr): string {
    if (e.t !== "i32" && e.t !== "u32") this.fail(`index of type ${e.t}`);
    return this.expr(e).x.s;
  }

  private expr(e: KExpr): { x: Spelled; t: KType } {
    return { x: this.spell(e), t: e.t };
  }

  private spell(e: KExpr): Spelled {
    switch (e.k) {
      case "lit":
        return this.literal(e.v, e.t);
      case "ref":
        return atom(this.names.name(e.name));
      case "id":
        return atom(e.which);
      case "load": {
        const t = this.bindingType.get(e.buf) ?? this.fail(`load from unknown binding ${e.buf}`);
        if (t !== e.t) this.fail(`load of ${e.t} from ${t} binding ${e.buf}`);
        return atom(`${this.access(e.buf, t, true)}[${this.index(e.index)}]`);
      }
      case "sload": {
        const t = this.sharedType.get(e.arr) ?? this.fail(`load from unknown shared array ${e.arr}`);
        if (t !== e.t) this.fail(`load of ${e.t} from ${t} shared array ${e.arr}`);
        return atom(`${this.names.name(e.arr, "shared")}[${this.index(e.index)}]`);
      }
      case "un":
        return this.unary(e);
      case "bin":
        return this.binary(e);
      case "select": {
        if (e.cond.t !== "bool") this.fail(`select on a ${e.cond.t} condition`);
        const c = this.spell(e.cond);
        return atom(`(${paren(c, c.p < REL)} ? ${this.spell(e.a).s} : ${this.spell(e.b).s})`);
      }
      case "cast":
        return this.cast(this.spell(e.a), e.a.t, e.t);
      case "vec": {
        const t = laneType(e.t);
        if (e.parts.length !== 4 || e.parts.some((p) => p.t !== t)) this.fail(`malformed ${e.t} constructor`);
        const make = MAKE_VECTOR[e.t] ?? this.fail(`no CUDA vector type for ${e.t}`);
        this.type(e.t);
        return atom(`${make}(${e.parts.map((p) => this.spell(p).s).join(", ")})`);
      }
      case "lane": {
        if (!isVector(e.a.t) || !(e.lane >= 0 && e.lane < 4)) this.fail(`lane ${e.lane} of a ${e.a.t} value`);
        const a = this.spell(e.a);
        return atom(`${paren(a, a.p < ATOM)}.${"xyzw"[e.lane]}`);
      }
      case "philox": {
        const fn = e.t === "v4f32" ? "bf_philox4" : "bf_philox";
        this.helpers.add(fn);
        const u = (x: KExpr) => this.cast(this.spell(x), x.t, "u32").s;
        return atom(`${fn}(${u(e.seed)}, ${u(e.step)}, ${e.stream >>> 0}u, ${u(e.index)})`);
      }
      case "splat":
        return this.fail(`${e.k} of ${e.t} survived legalization (internal error)`);
    }
  }

  private literal(v: number, t: KType): Spelled {
    if (isVector(t)) this.fail(`literal of vector type ${t}`);
    switch (t) {
      case "f32":
        return floatLiteral(v);
      case "f16":
      case "bf16":
        return this.fromF32(floatLiteral(t === "f16" ? Math.f16round(v) : bf16Round(v)), t);
      case "bool":
        return atom(v ? "true" : "false");
      case "u32":
        if (!Number.isInteger(v)) this.fail(`u32 literal ${v} is not an integer`);
        return atom(`${v >>> 0}u`);
      default: {
        if (!Number.isInteger(v)) this.fail(`${t} literal ${v} is not an integer`);
        const n = v | 0;
        if (n === -(2 ** 31)) return atom("(-2147483647 - 1)");
        return n < 0 ? { s: String(n), p: UNARY } : atom(String(n));
      }
    }
  }

  /** An f16/bf16 value as f32 (exact). */
  private toF32(a: Spelled, t: KType): Spelled {
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

  /** An f32 value rounded to f16/bf16 (to nearest, ties to even). */
  private fromF32(a: Spelled, t: KType): Spelled {
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

  private cast(a: Spelled, from: KType, to: KType): Spelled {
    if (from === to) return a;
    if (isVector(from) || isVector(to)) this.fail(`cast between ${from} and ${to} survived legalization`);
    if (to === "bool") {
      const zero = isFloat(from) ? "0.0f" : from === "u32" ? "0u" : "0";
      const x = this.toF32(a, from);
      return { s: `${paren(x, x.p <= REL)} != ${zero}`, p: REL, op: "!=" };
    }
    if (from === "bool") {
      const [one, zero] = isFloat(to) ? ["1.0f", "0.0f"] : to === "u32" ? ["1u", "0u"] : ["1", "0"];
      return this.fromF32(atom(`(${paren(a, a.p < REL)} ? ${one} : ${zero})`), to);
    }
    if (isFloat(from)) {
      const x = this.toF32(a, from);
      if (isFloat(to)) return this.fromF32(x, to);
      // Round toward zero like the reference's truncation; out of range saturates, NaN gives 0.
      return atom(`${to === "u32" ? "__float2uint_rz" : "__float2int_rz"}(${x.s})`);
    }
    // From an integer type.
    if (isFloat(to)) return this.fromF32(atom(`static_cast<float>(${a.s})`), to);
    return atom(`static_cast<${this.type(to)}>(${a.s})`);
  }

  private unary(e: Extract<KExpr, { k: "un" }>): Spelled {
    const t = e.a.t;
    const a = this.spell(e.a);
    if (isFloat(t)) {
      // f16/bf16: in f32, rounded back (see the file comment).
      const x = this.toF32(a, t);
      let r: Spelled;
      if (e.op === "neg") r = { s: `-${paren(x, x.p <= UNARY)}`, p: UNARY };
      else if (e.op === "reciprocal") r = { s: `1.0f / ${paren(x, x.p <= MUL)}`, p: MUL, op: "/" };
      else if (e.op === "not") return this.fail(`not of a ${t} value`);
      else {
        const fn = F32_MATH[e.op];
        if (fn === "bf_erf") this.helpers.add("bf_erf");
        r = atom(`${fn}(${x.s})`);
      }
      return this.fromF32(r, t);
    }
    switch (e.op) {
      case "neg":
        if (t === "u32") return { s: `0u - ${paren(a, a.p <= ADD)}`, p: ADD, op: "-" };
        if (t !== "i32") this.fail(`neg of a ${t} value`);
        return { s: `-${paren(a, a.p <= UNARY)}`, p: UNARY };
      case "not":
        return { s: `${t === "bool" ? "!" : "~"}${paren(a, a.p < ATOM)}`, p: UNARY };
      case "abs":
        if (t === "u32") return a;
        if (t !== "i32") this.fail(`abs of a ${t} value`);
        return atom(`abs(${a.s})`);
      default:
        return this.fail(`${e.op} of a ${t} value`);
    }
  }

  private binary(e: Extract<KExpr, { k: "bin" }>): Spelled {
    const t = e.a.t;
    if (e.b.t !== t) this.fail(`${e.op} of ${t} and ${e.b.t}`);
    const a0 = this.spell(e.a), b0 = this.spell(e.b);
    const half = isHalf(t);
    const a = half ? this.toF32(a0, t) : a0;
    const b = half ? this.toF32(b0, t) : b0;
    // Results of arithmetic on halves are rounded back; comparisons yield bool as they are.
    const back = (r: Spelled) => (half ? this.fromF32(r, t) : r);
    if (e.op === "max" || e.op === "min") {
      const fn = isFloat(t) ? (e.op === "max" ? "fmaxf" : "fminf") : e.op;
      if (t === "bool") this.fail(`${e.op} of bool values`);
      return back(atom(`${fn}(${a.s}, ${b.s})`));
    }
    if (e.op === "and" || e.op === "or") {
      if (t === "bool") {
        const [sym, p] = e.op === "and" ? ["&&", AND] : ["||", OR];
        const left = paren(a, a.p < REL && a.op !== sym);
        return { s: `${left} ${sym} ${paren(b, b.p < REL)}`, p, op: sym };
      }
      if (isFloat(t)) this.fail(`${e.op} of ${t} values`);
      const sym = e.op === "and" ? "&" : "|";
      return { s: `${paren(a, a.p < UNARY)} ${sym} ${paren(b, b.p < UNARY)}`, p: BIT, op: sym };
    }
    const op = BIN_OPS[e.op] ?? this.fail(`unknown binary op ${e.op}`);
    if (op.p === REL) {
      return { s: `${paren(a, a.p <= REL)} ${op.sym} ${paren(b, b.p <= REL)}`, p: REL, op: op.sym };
    }
    if (e.op === "mod" && isFloat(t)) this.fail(`mod of ${t} values`);
    if (t === "bool") this.fail(`${e.op} of bool values`);
    // Arithmetic is left-associative: a same-level right operand keeps its parentheses (float addition is
    // not associative), and so does a negated one, for legibility.
    const left = paren(a, a.p < op.p);
    const right = paren(b, b.p <= op.p || b.p === UNARY);
    return back({ s: `${left} ${op.sym} ${right}`, p: op.p, op: op.sym });
  }
}

/** Rounds to the nearest bf16 (ties to even), as __float2bfloat16_rn does; the literal is then exact. */
function bf16Round(v: number): number {
  const f = Math.fround(v);
  if (!Number.isFinite(f)) return f;
  const buf = new DataView(new ArrayBuffer(4));
  buf.setFloat32(0, f);
  const bits = buf.getUint32(0);
  const rounded = (bits + 0x7fff + ((bits >>> 16) & 1)) & 0xffff0000;
  buf.setUint32(0, rounded >>> 0);
  return buf.getFloat32(0);
}
