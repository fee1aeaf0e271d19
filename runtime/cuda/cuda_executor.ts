/**
 * Executes a Plan on an NVIDIA GPU through the driver API. Everything that can be made once is made in
 * `create`: one device allocation (the arena, see runtime/arena.ts) zeroed, one module per distinct kernel
 * source (NVRTC, cached on disk), the kernel arguments of every launch, and a CUDA graph holding the whole
 * step program (padding re-zeroed, launches, copies, then the parameter updates) so a step is one
 * cuGraphLaunch, after one uncaptured run (warmUp). The ABI, library GEMMs and their fallbacks, stream
 * ordering: DESIGN.md, notes: runtime/cuda/cuda_executor.ts.
 */
import {
  languageRefusal,
  type Plan,
  type PlanBinding,
  type PlanGemmOperand,
  type PlanKernel,
  storedBytes,
  storedSize,
  type TargetKernel,
} from "../../plan/plan.ts";
import { type Profile, profileOf } from "../profile.ts";
import type { CudaContext } from "./cuda_context.ts";
import { type DevicePtr, KernelArgs, type Pointer } from "./driver.ts";
import { CudaError } from "./cuda_errors.ts";
import { decodeStored, encodeStored, type HostArray } from "../host.ts";
import { checkedSteps, planBuffer, PlanExecutor } from "../plan_executor.ts";
import { kernelCacheKey } from "./kernel_cache.ts";
import { alignmentOf, CublasLt, groupAlignmentOf, LtCall, type LtCallSpec } from "./cublaslt.ts";
import { type ArenaOffsets, arenaOffsets, zeroRegions } from "../arena.ts";
import type { DiscoverOptions } from "./libs.ts";

/** The kernel entry point every CUDA kernel of a plan defines. */
export const KERNEL_ENTRY = "bf_kernel";

// CUDA limits: threads per block, and grid dimensions (x up to 2^31 - 1, y and z up to 65535).
const MAX_THREADS = 1024;
const MAX_GRID = [2 ** 31 - 1, 65535, 65535] as const;

export interface CudaExecutorOptions {
  /** Capture the step program in a CUDA graph (default: unless BERTFUSE_CUDA_GRAPHS=0). */
  readonly graphs?: boolean;
  /** GEMMs with a library variant: cuBLASLt ("library", the default) or the template kernel. */
  readonly gemm?: CudaGemmMode;
  /** Where to look for libcublasLt (default: the usual search, runtime/cuda/libs.ts). */
  readonly cublasLt?: DiscoverOptions;
  /** Where warnings go (a GEMM falling back to the template kernel); default: standard error. */
  readonly warn?: (line: string) => void;
}

export type CudaGemmMode = "library" | "template";

/**
 * The prepared cuBLASLt call of a GEMM (shared by equal calls), or null where cuBLASLt has no algorithm
 * for it (a heuristic miss, an unsupported shape or alignment): that GEMM then runs as the plan's template
 * kernel, which computes the same product, with one warning line rather than an abort. Other errors
 * (a broken library, a bad descriptor) still fail the executor.
 */
export function libraryCall<C>(
  calls: Map<string, C | null>,
  key: string,
  make: () => C,
  kernel: string,
  warn: (line: string) => void = (line) => console.error(line),
  instead = "runs as the template GEMM instead",
): C | null {
  const known = calls.get(key);
  if (known !== undefined) return known;
  try {
    const call = make();
    calls.set(key, call);
    return call;
  } catch (e) {
    if (!(e instanceof CudaError) || !/has no algorithm/.test(e.message)) throw e;
    warn(`warning: ${e.message}; kernel ${kernel} ${instead}`);
    calls.set(key, null);
    return null;
  }
}

/** BERTFUSE_CUDA_GEMM: library (default) or template. */
export function cudaGemmFromEnv(): CudaGemmMode {
  let v: string | undefined;
  try {
    v = Deno.env.get("BERTFUSE_CUDA_GEMM");
  } catch {
    v = undefined;
  }
  if (v === undefined || v === "" || v === "library") return "library";
  if (v === "template") return "template";
  throw new CudaError(`BERTFUSE_CUDA_GEMM must be library or template, got '${v}'`);
}

/** A kernel launch as the driver sees it. */
interface Launch {
  readonly fn: Pointer;
  readonly grid: readonly [number, number, number];
  readonly threads: number;
  readonly args: KernelArgs;
}

/** One step of the program as the driver sees it. */
export type CudaStep =
  | {
    readonly op: "launch";
    readonly index: number;
    readonly kernel: PlanKernel;
    readonly kernelIndex: number;
    readonly fn: Pointer;
    readonly grid: readonly [number, number, number];
    readonly threads: number;
    readonly args: KernelArgs;
  }
  | {
    /** A library GEMM (cuBLASLt) and then its epilogue kernel, if any. */
    readonly op: "gemm";
    readonly index: number;
    readonly kernel: PlanKernel;
    readonly kernelIndex: number;
    readonly call: LtCall;
    readonly a: DevicePtr;
    readonly b: DevicePtr;
    readonly d: DevicePtr;
    /** C, read with beta 1 (PlanGemm.c). */
    readonly c?: DevicePtr;
    /** The vector of the call's BIAS or bias-gradient epilogue (PlanGemm.epilogue). */
    readonly bias?: DevicePtr;
    readonly epilogue?: Launch;
    /** After the call: the bias gradient copied into the other buffers holding it (its `copies`). */
    readonly copies?: readonly { readonly dst: DevicePtr; readonly bytes: number; readonly what: string }[];
  }
  | {
    readonly op: "copy";
    readonly index: number;
    readonly src: DevicePtr;
    readonly dst: DevicePtr;
    readonly bytes: number;
    readonly what: string;
  }
  | {
    /** Padding the plan reads as zero, re-zeroed at the start of every run (layout.ts zeroRegions). */
    readonly op: "zero";
    readonly index: number;
    readonly dst: DevicePtr;
    readonly bytes: number;
    readonly what: string;
  };

/** Whether CUDA graphs are on: BERTFUSE_CUDA_GRAPHS=0 turns them off (direct launches, for debugging). */
export function cudaGraphsFromEnv(): boolean {
  let v: string | undefined;
  try {
    v = Deno.env.get("BERTFUSE_CUDA_GRAPHS");
  } catch {
    v = undefined;
  }
  if (v === undefined || v === "" || v === "1") return true;
  if (v === "0") return false;
  throw new CudaError(`BERTFUSE_CUDA_GRAPHS must be 0 or 1, got '${v}'`);
}

export class CudaExecutor extends PlanExecutor {
  private graphExec: Pointer = null;

  private constructor(
    readonly ctx: CudaContext,
    plan: Plan,
    readonly layout: ArenaOffsets,
    private readonly arena: DevicePtr,
    private readonly stream: Pointer,
    private readonly modules: readonly Pointer[],
    /** The step program followed by the parameter updates. */
    readonly program: readonly CudaStep[],
    /** Number of distinct modules (kernels with identical source share one). */
    readonly moduleCount: number,
    /** cuBLASLt and its prepared calls, when the program runs library GEMMs. */
    private readonly lt?: { readonly lib: CublasLt; readonly calls: readonly LtCall[] },
  ) {
    super(plan, CudaError);
  }

  /** Library GEMMs per step (0 when every GEMM runs as a template kernel). */
  get libraryGemms(): number {
    return this.program.filter((s) => s.op === "gemm").length;
  }

  /** Builds the executor; errors reject the promise (as the WebGPU executor's do). */
  static create(ctx: CudaContext, plan: Plan, opts: CudaExecutorOptions = {}): Promise<CudaExecutor> {
    return promised(() => CudaExecutor.createSync(ctx, plan, opts));
  }

  static createSync(ctx: CudaContext, plan: Plan, opts: CudaExecutorOptions = {}): CudaExecutor {
    const { driver } = ctx;
    checkKernels(plan);
    const gemmMode = opts.gemm ?? cudaGemmFromEnv();
    const layout = arenaOffsets(plan);
    const { free } = driver.memGetInfo();
    if (layout.totalBytes > free) {
      throw new CudaError(
        `plan ${plan.graph} needs ${layout.totalBytes} bytes of device memory; ${driver.info.name} has ${free} free`,
      );
    }
    const arena = driver.alloc(layout.totalBytes, `plan ${plan.graph}`);
    const modules: Pointer[] = [];
    let stream: Pointer = null;
    let lt: CublasLt | undefined;
    const calls = new Map<string, LtCall | null>();
    try {
      // Zeroed here, and the padding a run may dirty again at the start of every run (below): plans read
      // the padding of in-place flat vectors as zero.
      driver.memsetD8(arena, 0, layout.totalBytes);
      stream = driver.createStream();
      const fnBySource = new Map<string, Pointer>();
      const addressOf = (id: number) => arena + BigInt(layout.bufferOffsets[id]);
      const launchOf = (name: string, cuda: TargetKernel, bindings: readonly PlanBinding[]): Launch => {
        let fn = fnBySource.get(cuda.code);
        if (!fn) {
          const module = loadKernel(ctx, cuda.code, name);
          modules.push(module);
          fn = driver.getFunction(module, KERNEL_ENTRY, name);
          fnBySource.set(cuda.code, fn);
        }
        const ordered = [...bindings].sort((a, b) => a.index - b.index);
        return {
          fn,
          grid: cuda.grid,
          threads: cuda.workgroupSize,
          args: new KernelArgs(ordered.map((b) => addressOf(b.buffer))),
        };
      };
      const useLibrary = gemmMode === "library";
      // Fallback kernels of bias-gradient epilogues that run (left out of the program).
      const covered = new Set<string>();
      if (useLibrary && plan.kernels.some((k) => k.library)) lt = CublasLt.open(driver, opts.cublasLt);
      type Prepared =
        | Omit<Extract<CudaStep, { op: "launch" }>, "op" | "index">
        | Omit<
          Extract<CudaStep, { op: "gemm" }>,
          "index"
        >;
      const launches = plan.kernels.map((k, kernelIndex): Prepared => {
        const template = () => ({ kernel: k, kernelIndex, ...launchOf(k.name, k.source!, k.bindings) });
        const g = useLibrary ? k.library : undefined;
        if (!g || !lt) return template();
        const { call } = g;
        const elementAt = (o: Pick<PlanGemmOperand, "buffer" | "offset" | "dtype">, what: string) => {
          const b = bufferOf(plan, o.buffer, `kernel ${k.name}: GEMM operand ${what}`);
          return addressOf(b.id) + BigInt(o.offset * storedBytes(o.dtype));
        };
        const a = elementAt(call.a, "A"), b = elementAt(call.b, "B"), d = elementAt(call.d, "D");
        const c = call.c && elementAt(call.c, "C");
        const ep = call.epilogue;
        const bias = ep ? elementAt(ep.bias, "bias") : undefined;
        const full: LtCallSpec = {
          m: call.m,
          n: call.n,
          k: call.k,
          batch: call.batch,
          ...(call.outer ? { outer: call.outer } : {}),
          a: call.a,
          b: call.b,
          d: call.d,
          ...(call.c ? { c: call.c } : {}),
          ...(ep
            ? {
              epilogue: {
                kind: ep.kind,
                ...(ep.kind === "bgrad" ? { operand: ep.operand } : {}),
                bias: { dtype: ep.bias.dtype, batchStride: ep.bias.batchStride },
              },
            }
            : {}),
          align: {
            a: groupAlignmentOf(a, call.a, call.outer),
            b: groupAlignmentOf(b, call.b, call.outer),
            d: groupAlignmentOf(d, call.d, call.outer),
            ...(c !== undefined ? { c: groupAlignmentOf(c, call.c!, call.outer) } : {}),
            // Every group adds the same vector (plan/plan.ts PlanGemmEpilogue).
            ...(bias !== undefined ? { bias: alignmentOf(bias) } : {}),
          },
        };
        const keyOf = (spec: LtCallSpec) =>
          JSON.stringify([
            spec.m,
            spec.n,
            spec.k,
            spec.batch,
            spec.outer ?? 1,
            ...[spec.a, spec.b, spec.d, ...(spec.c ? [spec.c] : [])].map(
              (o) => [o.dtype, o.ld, o.trans, o.batchStride, o.outerStride ?? 0],
            ),
            spec.epilogue ?? null,
            spec.align,
          ]);
        const callOf = (spec: LtCallSpec, instead?: string) =>
          libraryCall(calls, keyOf(spec), () => new LtCall(lt!, spec, k.name), k.name, opts.warn, instead);
        let spec = full;
        let lc: LtCall | null;
        let copies: Extract<CudaStep, { op: "gemm" }>["copies"] = [];
        if (ep?.kind === "bgrad") {
          // A bias gradient the library cannot fuse: the call without it, and the column sums as kernels.
          lc = callOf(
            full,
            `runs without its bias-gradient epilogue; ${ep.fallback.join(", ")} compute the vector instead`,
          );
          if (lc) {
            for (const name of ep.fallback) covered.add(name);
            const from = bufferOf(plan, ep.bias.buffer, `kernel ${k.name}: bias gradient`);
            copies = ep.copies.map((id) => {
              const to = bufferOf(plan, id, `kernel ${k.name}: bias gradient copy`);
              if (storedSize(to) !== storedSize(from)) {
                throw new CudaError(
                  `kernel ${k.name}: bias gradient copy '${to.name}' differs in size from '${from.name}'`,
                );
              }
              return {
                dst: addressOf(id),
                bytes: storedSize(to),
                what: `${k.name}: bias gradient into '${to.name}'`,
              };
            });
          } else {
            const { epilogue: _, ...plain } = full;
            const { bias: _b, ...align } = plain.align;
            spec = { ...plain, align };
            lc = callOf(spec);
          }
        } else {
          lc = callOf(full);
        }
        if (!lc) return template();
        const withBias = spec.epilogue !== undefined;
        const epilogue = g.epilogue && launchOf(g.epilogue.name, g.epilogue.source, g.epilogue.bindings);
        return {
          op: "gemm",
          kernel: k,
          kernelIndex,
          call: lc,
          a,
          b,
          d,
          ...(c !== undefined ? { c } : {}),
          ...(bias !== undefined && withBias ? { bias } : {}),
          ...(epilogue ? { epilogue } : {}),
          ...(copies.length ? { copies } : {}),
        };
      });
      const zeroes = zeroRegions(plan, layout).map((r): CudaStep => ({
        op: "zero",
        index: -1,
        dst: arena + BigInt(r.offset),
        bytes: r.bytes,
        what: `padding of '${r.buffer}' (${r.bytes} bytes)`,
      }));
      const program: CudaStep[] = [
        ...zeroes,
        ...checkedSteps(plan, CudaError).flatMap((s): CudaStep[] => {
          if (s.op === "copy") return [{ ...s, src: addressOf(s.src.id), dst: addressOf(s.dst.id) }];
          const l = launches[s.kernel];
          // A column sum a library call's bias-gradient epilogue computes instead.
          if (covered.has(plan.kernels[s.kernel].name)) return [];
          return ["op" in l ? { ...l, index: s.index } : { op: "launch", index: s.index, ...l }];
        }),
      ];
      const ex = new CudaExecutor(
        ctx,
        plan,
        layout,
        arena,
        stream,
        modules,
        program,
        fnBySource.size,
        lt && { lib: lt, calls: [...calls.values()].filter((c): c is LtCall => c !== null) },
      );
      if (opts.graphs ?? cudaGraphsFromEnv()) {
        ex.warmUp();
        ex.capture();
      }
      return ex;
    } catch (e) {
      for (const c of calls.values()) if (c) tryIt(() => c.destroy());
      if (lt) tryIt(() => lt!.close());
      for (const m of modules) tryIt(() => driver.unloadModule(m));
      if (stream) tryIt(() => driver.destroyStream(stream));
      tryIt(() => driver.free(arena));
      throw e;
    }
  }

  /** Whether steps replay a CUDA graph (else they launch kernel by kernel). */
  get usesGraph(): boolean {
    return this.graphExec !== null;
  }

  /** The device address of a buffer, for interop (cuBLASLt calls, other CUDA code). */
  address(target: string | number): DevicePtr {
    return this.arena + BigInt(this.layout.bufferOffsets[this.buffer(target).id]);
  }

  write(target: string | number, data: ArrayLike<number>): void {
    this.alive();
    const b = this.buffer(target);
    this.ctx.driver.copyHtoD(this.address(b.id), encodeStored(b, data), `write '${b.name}'`);
  }

  /** Waits for the launched steps, then copies the buffers back. */
  readMany(targets: readonly (string | number)[]): Promise<HostArray[]> {
    return promised(() => {
      this.alive();
      this.sync();
      return targets.map((t) => {
        const b = this.buffer(t);
        const bytes = new Uint8Array(storedSize(b));
        this.ctx.driver.copyDtoH(bytes, this.address(b.id), `read '${b.name}'`);
        return decodeStored(b, bytes);
      });
    });
  }

  /**
   * Runs the step program once (then the parameter updates): one graph launch, or each launch and copy in
   * order. Resolves once the work is queued, not when it is done; errors inside kernels surface at the
   * next read() or finish().
   */
  step(): Promise<void> {
    return promised(() => this.stepSync());
  }

  private stepSync(): void {
    this.alive();
    if (this.graphExec) {
      this.ctx.driver.launchGraph(this.graphExec, this.stream, `step of ${this.plan.graph}`);
    } else {
      for (const s of this.program) this.issue(s);
    }
  }

  /** Resolves when all launched work has finished on the GPU. */
  finish(): Promise<void> {
    return promised(() => {
      this.alive();
      this.sync();
    });
  }

  /**
   * Per-launch GPU times with CUDA events over `iterations` steps (after one warm-up step), each launch
   * bracketed by its own event pair (direct launches, so the times exclude graph scheduling), and the
   * median time of a whole step as normally run (graph or not). Runs the program: buffers change as in step().
   */
  profile(iterations = 5): Promise<Profile> {
    return promised(() => this.profileSync(iterations));
  }

  private profileSync(iterations: number): Profile {
    this.alive();
    if (!Number.isInteger(iterations) || iterations < 1) {
      throw new CudaError(`profile needs a positive whole number of iterations, got ${iterations}`);
    }
    const { driver } = this.ctx;
    // A library GEMM counts as one launch: the call and its epilogue kernel, timed together.
    const launches = this.program.filter((s) => s.op === "launch" || s.op === "gemm");
    const events: Pointer[] = [];
    const event = () => {
      const e = driver.createEvent();
      events.push(e);
      return e;
    };
    try {
      const stepStart = event(), stepEnd = event();
      const pairs = launches.map(() => [event(), event()] as const);
      this.stepSync();
      this.sync();
      const stepMs: number[] = [];
      for (let i = 0; i < iterations; i++) {
        driver.recordEvent(stepStart, this.stream);
        this.stepSync();
        driver.recordEvent(stepEnd, this.stream);
        this.sync();
        stepMs.push(driver.elapsedMs(stepStart, stepEnd));
      }
      const samples: number[][] = launches.map(() => []);
      for (let i = 0; i < iterations; i++) {
        let j = 0;
        for (const s of this.program) {
          if (s.op === "copy" || s.op === "zero") {
            this.issue(s);
            continue;
          }
          driver.recordEvent(pairs[j][0], this.stream);
          this.issue(s);
          driver.recordEvent(pairs[j][1], this.stream);
          j++;
        }
        this.sync();
        pairs.forEach(([a, b], k) => samples[k].push(driver.elapsedMs(a, b) * 1e6));
      }
      const timed = launches.map((s) => {
        const l = s as Extract<CudaStep, { op: "launch" | "gemm" }>;
        return { step: s.index, kernelIndex: l.kernelIndex, kernel: l.kernel };
      });
      // CUDA events are GPU timestamps; the shared Profile type calls that "timestamp".
      const head = { method: "timestamp" as const, device: this.ctx.description, iterations };
      return profileOf(head, timed, samples, stepMs);
    } finally {
      for (const e of events) tryIt(() => driver.destroyEvent(e));
    }
  }

  protected release(): void {
    const { driver } = this.ctx;
    // Errors here would hide the error that made the caller give up; the process is ending or moving on.
    tryIt(() => driver.synchronize(this.stream));
    if (this.graphExec) tryIt(() => driver.destroyGraphExec(this.graphExec));
    for (const m of this.modules) tryIt(() => driver.unloadModule(m));
    for (const c of this.lt?.calls ?? []) tryIt(() => c.destroy());
    if (this.lt) tryIt(() => this.lt!.lib.close());
    tryIt(() => driver.destroyStream(this.stream));
    tryIt(() => driver.free(this.arena));
  }

  /**
   * Runs the program once, uncaptured, before capture, then zeroes the arena again (the run computed on
   * zeros and its updates overwrote parameters with the result). What a first call does lazily must not
   * happen inside a capture, where it is an error or is left out of the graph: loading a module's code on
   * first launch (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2), cuBLASLt's first-use setup.
   * A kernel that faults on zeros is reported here, by name, with direct launches.
   */
  private warmUp(): void {
    if (this.program.length === 0) return;
    for (const s of this.program) this.issue(s);
    this.sync();
    this.ctx.driver.memsetD8(this.arena, 0, this.layout.totalBytes);
  }

  /** Captures the program into a graph; a capture the driver refuses falls back to direct launches. */
  private capture(): void {
    if (this.program.length === 0) return;
    const { driver } = this.ctx;
    driver.beginCapture(this.stream);
    try {
      for (const s of this.program) this.issue(s);
    } catch (e) {
      driver.abandonCapture(this.stream);
      throw e;
    }
    try {
      this.graphExec = driver.endCaptureAndInstantiate(this.stream);
    } catch (e) {
      console.error(
        `warning: CUDA graph capture of ${this.plan.graph} failed (${
          (e as Error).message
        }); launching directly`,
      );
      this.graphExec = null;
    }
  }

  private issue(s: CudaStep): void {
    const { driver } = this.ctx;
    if (s.op === "launch") {
      driver.launch(s.fn, s.grid, s.threads, this.stream, s.args, `${s.kernel.name} (step ${s.index})`);
    } else if (s.op === "gemm") {
      s.call.run(s.a, s.b, s.d, this.stream, `${s.kernel.name} (step ${s.index})`, s.bias, s.c);
      for (const c of s.copies ?? []) driver.copyDtoDAsync(c.dst, s.bias!, c.bytes, this.stream, c.what);
      const e = s.epilogue;
      if (e) {
        driver.launch(
          e.fn,
          e.grid,
          e.threads,
          this.stream,
          e.args,
          `${s.kernel.name} epilogue (step ${s.index})`,
        );
      }
    } else if (s.op === "zero") {
      driver.memsetD8Async(s.dst, 0, s.bytes, this.stream, s.what);
    } else {
      driver.copyDtoDAsync(s.dst, s.src, s.bytes, this.stream, s.what);
    }
  }

  /** Waits for the stream; a kernel fault surfaces here, without the kernel's name (it is asynchronous). */
  private sync(): void {
    try {
      this.ctx.driver.synchronize(this.stream);
    } catch (e) {
      throw new CudaError(
        `${(e as Error).message} while running ${this.plan.graph}; to find the kernel, run again with ` +
          `BERTFUSE_CUDA_GRAPHS=0 CUDA_LAUNCH_BLOCKING=1 (each launch then reports its own error)`,
      );
    }
  }
}

const bufferOf = (plan: Plan, id: number, where: string) => planBuffer(plan, id, where, CudaError);

/** Checks the plan is CUDA and every kernel's launch shape is one CUDA accepts, naming the kernel otherwise. */
function checkKernels(plan: Plan): void {
  const refusal = languageRefusal(plan, "cuda", "the CUDA backend");
  if (refusal) throw new CudaError(refusal);
  const names = new Set(plan.kernels.map((k) => k.name));
  for (const k of plan.kernels) {
    const ep = k.library?.call.epilogue;
    if (ep?.kind === "bgrad") {
      const missing = ep.fallback.filter((n) => !names.has(n));
      if (missing.length || ep.fallback.includes(k.name)) {
        throw new CudaError(
          `kernel ${k.name}: its bias-gradient epilogue's fallback names ${
            missing.length ? `kernels the plan lacks (${missing.join(", ")})` : "the GEMM itself"
          }`,
        );
      }
    }
    checkTarget(k.name, k.source, k.bindings);
    const e = k.library?.epilogue;
    if (e) checkTarget(`${k.name} (GEMM epilogue ${e.name})`, e.source, e.bindings);
  }
}

function checkTarget(name: string, c: TargetKernel, bindings: readonly PlanBinding[]): void {
  if (!Number.isInteger(c.workgroupSize) || c.workgroupSize < 1 || c.workgroupSize > MAX_THREADS) {
    throw new CudaError(
      `kernel ${name}: block of ${c.workgroupSize} threads (CUDA allows 1 to ${MAX_THREADS})`,
    );
  }
  c.grid.forEach((g, i) => {
    if (!Number.isInteger(g) || g < 1 || g > MAX_GRID[i]) {
      throw new CudaError(
        `kernel ${name}: grid [${c.grid.join(", ")}] has dimension ${"xyz"[i]} = ${g} (1 to ${MAX_GRID[i]})`,
      );
    }
  });
  const indices = bindings.map((b) => b.index).sort((a, b) => a - b);
  indices.forEach((v, i) => {
    if (v !== i) {
      throw new CudaError(
        `kernel ${name}: binding indices [${indices.join(", ")}] are not 0..${indices.length - 1} ` +
          `(each is one parameter of ${KERNEL_ENTRY}, in order)`,
      );
    }
  });
  if (!c.code.includes(KERNEL_ENTRY)) {
    throw new CudaError(`kernel ${name}: CUDA source does not define ${KERNEL_ENTRY}`);
  }
}

/** The module for a kernel's source: from the disk cache when there, else compiled and cached. */
function loadKernel(ctx: CudaContext, source: string, name: string): Pointer {
  const { driver, nvrtc, cache } = ctx;
  const arch = driver.arch;
  const key = kernelCacheKey({
    source,
    arch,
    nvrtcVersion: nvrtc.versionString,
    options: nvrtc.keyOptions(arch),
  });
  const cached = cache.get(key);
  if (cached) {
    try {
      return driver.loadModule(cached, name);
    } catch {
      // A corrupt or foreign entry: drop it and compile afresh below.
      cache.remove(key);
    }
  }
  const cubin = nvrtc.compile(source, arch, name);
  const module = driver.loadModule(cubin, name);
  cache.put(key, cubin);
  return module;
}

/** Runs `f` now; its result or its exception as a promise (the executor's calls are synchronous FFI). */
function promised<T>(f: () => T): Promise<T> {
  try {
    return Promise.resolve(f());
  } catch (e) {
    return Promise.reject(e);
  }
}

function tryIt(f: () => void): void {
  try {
    f();
  } catch {
    // see callers
  }
}
