/**
 * What one row of the backend table (engine/backends.ts) says about a backend: its `--backend` name, its
 * probe, what it can do, which emitter writes its kernels and how it runs a graph. Types, and the one
 * error a command gets when the backend it asked for is not there.
 */
import type { Language } from "../compiler/targets/target.ts";
import type { Compiled } from "../compiler/driver/compile.ts";
import type { Graph } from "../ir/mod.ts";
import type { Backend, StepExecutor } from "../runtime/backend.ts";

/** A probe's answer when the backend cannot run here: one line naming what is missing. */
export interface Unavailable {
  readonly unavailable: string;
}

export const isUnavailable = (r: unknown): r is Unavailable =>
  typeof r === "object" && r !== null && "unavailable" in r;

/** The float storage types a graph may ask for (precision fp32, fp16, bf16). */
export type FloatDType = "f32" | "f16" | "bf16";

/** Limits read from an opened context; absent where the backend does not say. */
export interface BackendLimits {
  /** The largest buffer one kernel binding may cover, in bytes. */
  readonly maxStorageBindingBytes?: number;
  /** The largest buffer the device allocates, in bytes. */
  readonly maxBufferBytes?: number;
}

/** A graph loaded into a backend's step executor, with the compiler's output (none when interpreted). */
export interface CompiledStep<Ex extends StepExecutor = StepExecutor> {
  readonly executor: Ex;
  readonly compiled?: Compiled;
}

export interface GraphBackendOptions {
  /** Fuse (default) or run one kernel per primitive op; backends without kernels ignore it. */
  readonly fuse?: boolean;
  /** The reference interpreter's arithmetic (default f32); compiled backends ignore it. */
  readonly precision?: "f32" | "f64";
}

/**
 * One backend. `Ctx` is what its probe opens (a device, a driver context) and the methods take it back,
 * so the table can hold rows of different contexts side by side (method parameters compare bivariantly).
 */
export interface BackendRow<
  Ctx = unknown,
  Step extends CompiledStep = CompiledStep,
  Name extends string = string,
> {
  readonly name: Name;
  /** How messages name it: "no CUDA (…)", "needs CUDA". */
  readonly label: string;
  /** `auto` tries rows from the highest preference down and takes the first whose probe succeeds. */
  readonly preference: number;
  /** The float storage types its kernels (or interpreter) hold, and why the others are missing. */
  readonly dtypes: readonly FloatDType[];
  readonly lacks?: Partial<Record<FloatDType, string>>;
  /** The language the compiler writes its kernels in; absent when it runs graphs directly. */
  readonly language?: Language;
  /** What `--precision auto` means here. */
  readonly autoPrecision: "fp32" | "fp16" | "bf16";
  /**
   * Why `auto` passes over a backend that opened (a software WebGPU adapter, slower than the CPU backend);
   * undefined to take it. Asked by name, the backend is used all the same.
   */
  autoRefusal?(ctx: Ctx): string | undefined;
  /** Opens the backend, or says in one line why it cannot. */
  probe(): Promise<Ctx | Unavailable>;
  /** The device as the choice line spells it ("adapter '…'"); "" when there is nothing to say. */
  says(ctx: Ctx, auto: boolean): string;
  /** The device's name for benchmark records. */
  device(ctx: Ctx): string;
  limits(ctx: Ctx): BackendLimits;
  /** Compiles `g` (fused or not) and loads it into a step executor. */
  compile(ctx: Ctx, g: Graph, fuse: boolean): Promise<Step>;
  /** A graph-level Backend for inference: each graph compiled once, run on named feeds. */
  graphBackend(ctx: Ctx, opts: GraphBackendOptions): Backend;
}

/** `--backend X` cannot run here: one line naming what is missing; named after the row ("CudaBackendError"). */
export class BackendUnavailableError extends Error {
  constructor(backend: string, message: string) {
    super(message);
    this.name = `${backend[0].toUpperCase()}${backend.slice(1)}BackendError`;
  }
}
