/**
 * The compiler driver: model -> graph (training step or inference) -> simplification passes -> fusion
 * -> lowering -> per-target kernels -> Plan. Command-line tools and the runtimes' callers go through here.
 */
import type { Graph } from "../ir/mod.ts";
import { buildPlan, type BuiltPlan, type Emitter, type Target } from "./build_plan.ts";
import { type DebugFlags, Fuel, readDebugFlags } from "./debug.ts";
import { fuseGraph } from "./fusion/fuse.ts";
import type { FusionResult } from "./fusion/types.ts";
import { cse } from "./passes/cse.ts";
import type { Precision } from "./passes/precision.ts";
import { chooseStorage, detectPrecision, type StoragePlan } from "./storage_precision.ts";
import { dce } from "./passes/dce.ts";
import { simplify } from "./passes/simplify.ts";
import { makePassContext, runPipeline } from "./pipeline.ts";

export interface CompileOptions {
  readonly fuse: boolean;
  readonly emitters: Partial<Record<Target, Emitter>>;
  readonly flags?: DebugFlags;
  /**
   * The mixed-precision policy's storage half (compiler/storage_precision.ts): activations between
   * kernels are stored in the low precision. Default "auto": the precision `applyPrecision` prepared the
   * graph for (GEMMs on operands cast from f32), so an fp32 graph narrows nothing.
   */
  readonly precision?: Precision | "auto";
  /** CUDA: matmul kernels that qualify get a cuBLASLt variant (build_plan.ts); default true. */
  readonly libraryGemms?: boolean;
}

export interface Compiled extends BuiltPlan {
  /** The graph after simplification, which the plan executes. */
  readonly graph: Graph;
  readonly fusion: FusionResult;
  /** The stored dtype of every materialized value. */
  readonly storage: StoragePlan;
  readonly passTimings: readonly { pass: string; ms: number }[];
}

export const SIMPLIFY_PASSES = [simplify, cse, dce];

export function compileGraph(g: Graph, opts: CompileOptions): Compiled {
  const flags = opts.flags ?? readDebugFlags();
  const fuel = new Fuel(flags.fusionFuel);
  const piped = runPipeline(g, SIMPLIFY_PASSES, makePassContext(flags, fuel), {
    knownPasses: [...SIMPLIFY_PASSES.map((p) => p.name), "fusion"],
  });
  const t0 = performance.now();
  const fusion = fuseGraph(piped.graph, {
    fuse: opts.fuse && !flags.skipPasses.has("fusion"),
    takeFuel: () => fuel.take(),
    log: flags.level >= 3 ? (m) => console.error(m) : undefined,
  });
  const precision = !opts.precision || opts.precision === "auto"
    ? detectPrecision(piped.graph)
    : opts.precision;
  const storage = chooseStorage(piped.graph, fusion, precision);
  const t1 = performance.now();
  const built = buildPlan(piped.graph, fusion, opts.emitters, storage.storedType, {
    libraryGemms: opts.libraryGemms,
  });
  const t2 = performance.now();
  if (flags.level >= 4) {
    for (const k of built.plan.kernels) if (k.wgsl) console.error(`// ${k.name}\n${k.wgsl.code}`);
  }
  const passTimings = [
    ...piped.timings.map((t) => ({ pass: t.pass, ms: t.ms })),
    { pass: "fusion", ms: t1 - t0 },
    { pass: "lower+emit+plan", ms: t2 - t1 },
  ];
  if (flags.level >= 1) {
    for (const t of passTimings) {
      console.error(`pass ${t.pass}: ${t.ms.toFixed(1)} ms`);
    }
  }
  return { ...built, graph: piped.graph, fusion, storage, passTimings };
}
