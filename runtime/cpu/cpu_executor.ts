/**
 * Executes a Plan on the CPU: the plan's C kernels (compiler/codegen/c.ts) compiled into shared libraries
 * (cc.ts, cached on disk) and loaded with Deno.dlopen; one arena for the whole memory plan, laid out as the
 * CUDA runtime lays out device memory (runtime/arena.ts: slots at 256-byte offsets, zeroed once); the
 * step program as a list of prepared calls: kernel launches, sgemm calls (blas.ts) with their epilogue
 * kernels, copies, then the parameter updates. Nothing is allocated per step (the kernel ABI: DESIGN.md,
 * notes: runtime/cpu/cpu_executor.ts).
 */
import {
  languageRefusal,
  type Plan,
  type PlanBinding,
  type PlanBuffer,
  storedSize,
  type TargetKernel,
} from "../../plan/plan.ts";
import { type ArenaOffsets, arenaOffsets } from "../arena.ts";
import { decodeStored, encodeStored, type HostArray } from "../host.ts";
import { checkedSteps, PlanExecutor } from "../plan_executor.ts";
import { type Profile, profileOf } from "../profile.ts";
import { type Blas, type BlasCall, blasCallOf, blasCan, type GemmEngine } from "./blas.ts";
import { type CCompiler, compileLibrary } from "./cc.ts";
import { CpuError } from "./cpu_errors.ts";
import { openPool } from "./pool.ts";

/** The entry point of every C kernel; sources are renamed `bf_kernel_<i>` when joined into one library. */
const ENTRY = "bf_kernel";
/** A parallel kernel's loop body (compiler/codegen/c.ts C_BODY), renamed with the entry. */
const BODY = "bf_body";
/** Distinct kernel sources per translation unit: units compile in parallel, one per core at most. */
const SOURCES_PER_UNIT = 12;

export interface CpuContext {
  readonly cc: CCompiler;
  readonly description: string;
  /** OpenBLAS and oneDNN, when found. */
  readonly blas?: Blas;
  readonly onednn?: Blas;
  /**
   * What runs a plan's f32 GEMM library calls: oneDNN's or OpenBLAS's sgemm, the backend's own (sgemm.c;
   * where neither is found), or the plan's C template kernel (tests of the template set it).
   */
  readonly gemms: GemmEngine | "template";
  /** Threads of the process's pool (pool.ts), the calling thread included. */
  readonly threads: number;
}

type Kernel = Deno.PointerValue;
type Fn = (args: Deno.PointerValue) => void;

type Step = Readonly<
  | { op: "launch"; index: number; kernel: number; fn: Fn; args: Kernel }
  | { op: "gemm"; index: number; kernel: number; call: BlasCall; epilogue?: { fn: Fn; args: Kernel } }
  | { op: "copy"; index: number; src: number; dst: number; bytes: number }
>;

export class CpuExecutor extends PlanExecutor {
  private constructor(
    readonly ctx: CpuContext,
    plan: Plan,
    readonly layout: ArenaOffsets,
    /** The arena, its first byte at `base` bytes into `memory` (aligned for 64-byte vector accesses). */
    private readonly memory: Uint8Array<ArrayBuffer>,
    private readonly base: number,
    private readonly libraries: readonly Library[],
    readonly program: readonly Step[],
    /** Kept alive: the argument arrays the prepared calls point to. */
    private readonly keep: readonly unknown[],
  ) {
    super(plan, CpuError);
  }

  /** Library GEMMs per step (0 when every GEMM runs as the template kernel). */
  get libraryGemms(): number {
    return this.program.filter((s) => s.op === "gemm").length;
  }

  static async create(ctx: CpuContext, plan: Plan): Promise<CpuExecutor> {
    const refusal = languageRefusal(plan, "c", "the CPU backend");
    if (refusal) throw new CpuError(refusal);
    const { gemms: engine } = ctx;
    const useBlas = engine === "own" || (engine === "openblas" && !!ctx.blas) ||
      (engine === "onednn" && !!ctx.onednn);
    const layout = arenaOffsets(plan);
    const memory = new Uint8Array(layout.totalBytes + 64);
    const baseAddress = Deno.UnsafePointer.value(Deno.UnsafePointer.of(memory));
    const base = Number((64n - (BigInt(baseAddress) % 64n)) % 64n);
    const addressOf = (id: number) => BigInt(baseAddress) + BigInt(base + layout.bufferOffsets[id]);

    // Every distinct source once (identical kernels of every layer share one).
    const sources: string[] = [];
    const sourceIndex = new Map<string, number>();
    const want = (t: TargetKernel) => {
      if (!sourceIndex.has(t.code)) sourceIndex.set(t.code, sources.push(t.code) - 1);
    };
    // A GEMM that qualifies (f32 operands) runs as sgemm and its epilogue kernel; the others as the template.
    const gemms = plan.kernels.map(({ library: l }) => (useBlas && l && blasCan(l.call) ? l : undefined));
    plan.kernels.forEach((k, i) => {
      const g = gemms[i];
      if (!g) want(k.source);
      else if (g.epilogue) want(g.epilogue.source);
    });
    const units: number[][] = [];
    for (let i = 0; i < sources.length; i += SOURCES_PER_UNIT) {
      units.push(sources.slice(i, i + SOURCES_PER_UNIT).map((_, j) => i + j));
    }
    const pool = await openPool(ctx);
    const building = Promise.all(
      units.map((u, n) =>
        compileLibrary(ctx.cc, unitSource(u, sources), `${plan.graph} (part ${n + 1} of ${units.length})`, [
          pool.path,
        ])
      ),
    );
    // The arena's pages faulted in while cc builds the kernels, not by the first step (pool.c).
    pool.lib.symbols.bf_arena_prepare(memory, BigInt(memory.byteLength));
    const paths = await building;
    const libraries = units.map((u, n) => loadLibrary(paths[n], u.map((i) => `${ENTRY}_${i}`)));
    const fnOf: Fn[] = [];
    units.forEach((u, n) =>
      u.forEach((i) => (fnOf[i] = libraries[n].symbols[`${ENTRY}_${i}`] as unknown as Fn))
    );

    const keep: unknown[] = [];
    const argsOf = (bindings: readonly PlanBinding[]) => {
      const ordered = [...bindings].sort((a, b) => a.index - b.index);
      const arr = new BigUint64Array(ordered.map((b) => addressOf(b.buffer)));
      keep.push(arr);
      return Deno.UnsafePointer.of(arr);
    };
    const prepared = plan.kernels.map((k, kernel) => {
      const g = gemms[kernel];
      if (!g) {
        return {
          op: "launch" as const,
          kernel,
          fn: fnOf[sourceIndex.get(k.source.code)!],
          args: argsOf(k.bindings),
        };
      }
      const bufferAt = (id: number) => {
        const b = plan.buffers[id];
        if (!b) throw new CpuError(`kernel ${k.name}: GEMM operand in buffer ${id}, which the plan lacks`);
        return addressOf(id);
      };
      const call = blasCallOf(pool, g.call, bufferAt, k.name, engine as GemmEngine);
      const e = g.epilogue;
      return {
        op: "gemm" as const,
        kernel,
        call,
        ...(e ? { epilogue: { fn: fnOf[sourceIndex.get(e.source.code)!], args: argsOf(e.bindings) } } : {}),
      };
    });
    const program = checkedSteps(plan, CpuError).map((s): Step =>
      s.op === "launch" ? { ...prepared[s.kernel], index: s.index } : {
        op: "copy",
        index: s.index,
        src: base + layout.bufferOffsets[s.src.id],
        dst: base + layout.bufferOffsets[s.dst.id],
        bytes: s.bytes,
      }
    );
    return new CpuExecutor(ctx, plan, layout, memory, base, libraries, program, keep);
  }

  private offset(b: PlanBuffer): number {
    return this.base + this.layout.bufferOffsets[b.id];
  }

  /** Writes host values into a buffer, converted to its stored form (f16/bf16 rounded, bool as u32 0/1). */
  write(target: string | number, data: ArrayLike<number>): void {
    this.alive();
    const b = this.buffer(target);
    // Encoded straight into the arena: no temporary (BERT-base's 440 MB of weights were copied twice).
    const at = this.offset(b);
    encodeStored(b, data, this.memory.subarray(at, at + storedSize(b)));
  }

  readMany(targets: readonly (string | number)[]): Promise<HostArray[]> {
    this.alive();
    return Promise.resolve(targets.map((t) => {
      const b = this.buffer(t);
      const at = this.offset(b);
      // decodeStored copies the bytes once; the view saves a second copy.
      return decodeStored(b, this.memory.subarray(at, at + storedSize(b)));
    }));
  }

  step(): Promise<void> {
    this.alive();
    for (const s of this.program) this.issue(s);
    return Promise.resolve();
  }

  private issue(s: Step): void {
    if (s.op === "launch") s.fn(s.args);
    else if (s.op === "gemm") {
      s.call.run();
      if (s.epilogue) s.epilogue.fn(s.epilogue.args);
    } else this.memory.copyWithin(s.dst, s.src, s.src + s.bytes);
  }

  /** Every step has finished when step() returns (kernels run synchronously); for callers that wait. */
  finish(): Promise<void> {
    this.alive();
    return Promise.resolve();
  }

  /** Wall-clock time of each launch (a GEMM with its epilogue counts as one) and of whole steps. */
  profile(iterations = 5): Promise<Profile> {
    this.alive();
    if (!Number.isInteger(iterations) || iterations < 1) {
      throw new CpuError(`profile needs a positive whole number of iterations, got ${iterations}`);
    }
    for (const s of this.program) this.issue(s);
    const stepMs: number[] = [];
    const launches = this.program.filter((s) => s.op !== "copy");
    const samples: number[][] = launches.map(() => []);
    for (let i = 0; i < iterations; i++) {
      const t0 = performance.now();
      let j = 0;
      for (const s of this.program) {
        const t = performance.now();
        this.issue(s);
        if (s.op !== "copy") samples[j++].push((performance.now() - t) * 1e6);
      }
      stepMs.push(performance.now() - t0);
    }
    const timed = launches.map((s) => {
      const kernelIndex = (s as Extract<Step, { kernel: number }>).kernel;
      return { step: s.index, kernelIndex, kernel: this.plan.kernels[kernelIndex] };
    });
    return Promise.resolve(
      profileOf({ method: "wallclock", device: this.ctx.description, iterations }, timed, samples, stepMs),
    );
  }

  // The libraries stay loaded (see loadLibrary); the arena goes with this object.
  protected release(): void {}
}

type Library = Deno.DynamicLibrary<Record<string, Deno.ForeignFunction>>;
const loaded = new Map<string, Library>();

/**
 * A compiled library, opened once per process and never closed: unloading one while libgomp's worker
 * threads still return through its code crashed the process (seen as a segfault at an unmapped address
 * in the unloaded library), and a cached library is reused by every executor of the same kernels.
 */
function loadLibrary(path: string, symbols: readonly string[]): Library {
  let lib = loaded.get(path);
  if (!lib) {
    lib = Deno.dlopen(
      path,
      Object.fromEntries(symbols.map((s) => [s, { parameters: ["pointer"], result: "void" } as const])),
    ) as Library;
    loaded.set(path, lib);
  }
  return lib;
}

/** One translation unit: each source with its entry and body renamed (helpers are include-guarded). */
function unitSource(indices: readonly number[], sources: readonly string[]): string {
  return indices.map((i) =>
    `#define ${ENTRY} ${ENTRY}_${i}\n#define ${BODY} ${BODY}_${i}\n${
      sources[i]
    }#undef ${ENTRY}\n#undef ${BODY}\n`
  ).join("\n");
}
