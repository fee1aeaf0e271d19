/**
 * Spelling kernel-IR names as WGSL identifiers. A name stays as written unless WGSL forbids it (keyword,
 * reserved word, not an identifier) or it would shadow something the emitted code relies on (a builtin
 * function, a predeclared type or enumerant, a prelude helper, the prologue's ids); then it gets a `_`
 * suffix (more if that is taken too). Assignment follows first appearance, so output is deterministic.
 */
import { PRELUDE_NAMES } from "./wgsl_prelude.ts";

// WGSL keywords and reserved words (WGSL spec §15.1-15.2).
const RESERVED =
  `alias break case const const_assert continue continuing default diagnostic discard else enable
false fn for if let loop override requires return struct switch true var while
NULL Self abstract active alignas alignof as asm asm_fragment async attribute auto await become
binding_array cast catch class co_await co_return co_yield coherent column_major common compile
compile_fragment concept const_cast consteval constexpr constinit crate debugger decltype delete demote
demote_to_helper do dynamic_cast enum explicit export extends extern external fallthrough filter final
finally friend from fxgroup get goto groupshared highp impl implements import inline instanceof interface
layout lowp macro macro_rules match mediump meta mod module move mut mutable namespace new nil noexcept
noinline nointerpolation noperspective null nullptr of operator package packoffset partition pass patch
pixelfragment precise precision premerge priv protected pub public readonly ref regardless register
reinterpret_cast require resource restrict self set shared sizeof smooth snorm static static_assert
static_cast std subroutine super target template this thread_local throw trait try type typedef typeid
typename typeof union unless unorm unsafe unsized use using varying virtual volatile wgsl where with
writeonly yield`;

// Predeclared names the emitted code uses: types, address spaces and access modes (bindings live at
// module scope, where shadowing them would break their own declarations) and builtin functions.
const PREDECLARED = `bool f16 f32 i32 u32 vec2 vec3 vec4 array atomic ptr
function private workgroup uniform storage read write read_write
abs exp log sqrt inverseSqrt tanh max min clamp select bitcast sign workgroupBarrier storageBarrier
arrayLength`;

/** Names the emitter itself declares: the entry point, its builtin parameters and the prologue ids. */
export const PROLOGUE_NAMES = ["main", "local_index", "group_id", "lid", "wg", "gid"] as const;

const TAKEN: ReadonlySet<string> = new Set([
  ...RESERVED.split(/\s+/),
  ...PREDECLARED.split(/\s+/),
  ...PRELUDE_NAMES,
  ...PROLOGUE_NAMES,
]);

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

export class WgslNamer {
  private readonly spelled = new Map<string, string>();
  private readonly used = new Set<string>();

  /** The WGSL identifier for an IR name (the same one every time it is asked). */
  name(irName: string): string {
    const have = this.spelled.get(irName);
    if (have !== undefined) return have;
    let base = irName.replace(/[^A-Za-z0-9_]/g, "_");
    if (!IDENT.test(base)) base = `v_${base}`;
    // WGSL reserves identifiers starting with "__" and the lone "_".
    if (base.startsWith("__") || base === "_") base = `v${base}`;
    let out = base;
    while (TAKEN.has(out) || this.used.has(out)) out += "_";
    this.spelled.set(irName, out);
    this.used.add(out);
    return out;
  }
}
