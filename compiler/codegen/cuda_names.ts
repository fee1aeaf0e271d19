/**
 * Spelling kernel-IR names as CUDA C++ identifiers. A name stays as written unless C++ forbids it
 * (keyword, reserved `__x` / `_X` / `x__y` form, not an identifier) or it would hide something the
 * emitted code calls: CUDA's built-in variables, the math functions and intrinsics the emitter spells, the
 * vector types, the prelude's helpers (everything named `bf_...` is the emitter's), and the prologue's
 * ids. Such a name gets a `_0` suffix (`_1` ... if taken). Assignment follows first appearance, so output is
 * deterministic.
 */
import { CUDA_PRELUDE_NAMES } from "./cuda_prelude.ts";

// C++20 keywords and alternative tokens, and the CUDA keywords of device code.
const KEYWORDS = `alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await co_return
co_yield decltype default delete do double dynamic_cast else enum explicit export extern false float for
friend goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private
protected public register reinterpret_cast requires return short signed sizeof static static_assert
static_cast struct switch template this thread_local throw true try typedef typeid typename union unsigned
using virtual void volatile wchar_t while xor xor_eq override final import module
__global__ __device__ __host__ __shared__ __constant__ __managed__ __restrict__ __launch_bounds__`;

// Names the emitted code refers to: built-in variables, types, functions and intrinsics.
const USED = `threadIdx blockIdx blockDim gridDim warpSize
float4 int4 uint4 uint2 half __half __nv_bfloat16 make_float4 make_int4 make_uint4
expf logf sqrtf rsqrtf tanhf fabsf fmaxf fminf abs min max umin umax erff
__syncthreads __shfl_xor_sync __umulhi __float2int_rz __float2uint_rz __int_as_float __uint_as_float
__float2half_rn __half2float __float2bfloat16_rn __bfloat162float __hmax __hmin __habs
NULL assert printf`;

/** Names the emitter declares in every kernel: the entry point and the thread ids. */
export const CUDA_PROLOGUE_NAMES = ["bf_kernel", "lid", "wg", "gid"] as const;

const TAKEN: ReadonlySet<string> = new Set([
  ...KEYWORDS.split(/\s+/),
  ...USED.split(/\s+/),
  ...CUDA_PRELUDE_NAMES,
  ...CUDA_PROLOGUE_NAMES,
]);

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

export class CudaNamer {
  private readonly spelled: Record<"local" | "binding" | "shared", Map<string, string>> = {
    local: new Map(),
    binding: new Map(),
    shared: new Map(),
  };
  private readonly used = new Set<string>();
  private readonly nextSuffix = new Map<string, number>();
  private readonly nextTemp = new Map<string, number>();

  /**
   * The C++ identifier for an IR name (the same one every time it is asked). Bindings, shared arrays and
   * locals are separate kinds of IR names (WGSL lets a local reuse a binding's name; C++ would not let it
   * redeclare a parameter), so each kind gets identifiers of its own.
   */
  name(irName: string, kind: "local" | "binding" | "shared" = "local"): string {
    const spelled = this.spelled[kind];
    const have = spelled.get(irName);
    if (have !== undefined) return have;
    let base = irName.replace(/[^A-Za-z0-9_]/g, "_");
    if (!IDENT.test(base)) base = `v_${base}`;
    // Reserved for the implementation: any "__", and "_" + capital at the start. "bf_" is the emitter's.
    base = base.replace(/__+/g, "_");
    if (base.startsWith("_") || base.startsWith("bf_")) base = `v${base}`;
    let out = base;
    // A numbered suffix after one "_" (appending underscores could make a reserved "__"): the lowest free
    // one. Names are never freed, so the search resumes where the last one for this base ended (a scan
    // from 0 each time was quadratic in a kernel's many locals of one base).
    const stem = base.replace(/_+$/, "");
    let n = this.nextSuffix.get(stem) ?? 0;
    if (TAKEN.has(out) || this.used.has(out)) {
      for (out = `${stem}_${n}`; TAKEN.has(out) || this.used.has(out); out = `${stem}_${++n}`);
      this.nextSuffix.set(stem, n + 1);
    }
    spelled.set(irName, out);
    this.used.add(out);
    return out;
  }

  /** A fresh identifier for the emitter's own temporaries (`bf_` names never come from the IR). */
  temp(base: string): string {
    let n = this.nextTemp.get(base) ?? 0;
    while (this.used.has(`bf_${base}${n}`)) n++;
    const out = `bf_${base}${n}`;
    this.nextTemp.set(base, n + 1);
    this.used.add(out);
    return out;
  }
}
