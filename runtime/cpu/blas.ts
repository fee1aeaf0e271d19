/**
 * GEMMs on the CPU through OpenBLAS's cblas_sgemm, driven by the same library-call descriptors the
 * CUDA runtime hands cuBLASLt (plan/plan.ts PlanGemm): one cblas_sgemm per batch entry, f32 operands only
 * (f16/bf16 GEMMs run as the template kernel). Opened once per process, single-threaded: the thread pool
 * (pool.c `bf_gemm`) runs one sgemm per block, so GEMMs and kernels share one set of threads (where the
 * library is found: DESIGN.md, notes: runtime/cpu/blas.ts). Without it the same calls run on the
 * backend's own sgemm (sgemm.c).
 */
import type { PlanGemm } from "../../plan/plan.ts";
import { env } from "../code_cache.ts";
import { firstMatch, ldSoConfDirs, SYSTEM_LIB_DIRS } from "../library_finder.ts";
import { CpuError } from "./cpu_errors.ts";
import type { Pool } from "./pool.ts";

const SYMBOLS = {
  openblas_set_num_threads: { parameters: ["i32"], result: "void" },
  openblas_get_config: { parameters: [], result: "pointer" },
  openblas_get_corename: { parameters: [], result: "pointer" },
} as const;

export interface Blas {
  readonly path: string;
  /** OpenBLAS's configuration line (version, core, threading). */
  readonly config: string;
  /** The core whose kernels OpenBLAS runs (its own choice, or OPENBLAS_CORETYPE's), for benchmark records. */
  readonly corename: string;
  readonly lib: Deno.DynamicLibrary<typeof SYMBOLS>;
}

const CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112;

/** OpenBLAS's sonames: the plain build, and the pthread/OpenMP ones some distributions name apart. */
const OPENBLAS = /^libopenblas[po]?\.so(\.\d+)*$/;

/** Paths OpenBLAS may be at, best first (runtime/library_finder.ts searches the folders). */
function candidates(): string[] {
  const explicit = env("BERTFUSE_BLAS");
  // The pthread build first: run single-threaded it starts no threads at all, where the OpenMP build
  // loads libgomp (single-threaded too, through each calling thread's OpenMP setting; pool.c).
  const variants = ["x86_64", "aarch64"].flatMap((a) =>
    ["pthread", "openmp"].map((v) => `/usr/lib/${a}-linux-gnu/openblas-${v}`)
  );
  const dirs = [
    ...(env("LD_LIBRARY_PATH") ?? "").split(":").filter((d) => d),
    ...SYSTEM_LIB_DIRS,
    ...ldSoConfDirs(),
    "/usr/lib",
    "/usr/local/lib",
    "/opt/OpenBLAS/lib",
  ];
  const found = [...variants, ...dirs].map((d) => firstMatch([d], OPENBLAS)).filter((p) => p !== null);
  return [...new Set([...(explicit ? [explicit] : []), ...found])];
}

/**
 * `f()` with an environment variable set, then restored: OpenBLAS reads its thread count when it is
 * loaded (a pool of its own otherwise starts then), and child processes (the PyTorch peer) keep theirs.
 */
function withEnv<T>(name: string, value: string, f: () => T): T {
  let before: string | undefined;
  try {
    before = Deno.env.get(name);
    Deno.env.set(name, value);
  } catch {
    return f(); // no --allow-env: openblas_set_num_threads(1) after loading still applies
  }
  try {
    return f();
  } finally {
    if (before === undefined) Deno.env.delete(name);
    else Deno.env.set(name, before);
  }
}

let opened: Blas | { missing: string } | undefined;

/** OpenBLAS, opened once per process, or why not (one line). */
export function openBlas(): Blas | { missing: string } {
  if (opened) return opened;
  if (env("BERTFUSE_BLAS") === "none") return opened = { missing: "OpenBLAS not used (BERTFUSE_BLAS=none)" };
  const tried: string[] = [];
  for (const path of candidates()) {
    try {
      Deno.statSync(path);
    } catch {
      continue;
    }
    try {
      const lib = withEnv("OPENBLAS_NUM_THREADS", "1", () => Deno.dlopen(path, SYMBOLS));
      lib.symbols.openblas_set_num_threads(1);
      const text = (p: Deno.PointerValue, none: string) =>
        p ? new Deno.UnsafePointerView(p).getCString() : none;
      const config = text(lib.symbols.openblas_get_config(), "OpenBLAS").trim();
      const corename = text(lib.symbols.openblas_get_corename(), "unknown").trim();
      return opened = { path, config, corename, lib };
    } catch (e) {
      tried.push(`${path}: ${(e as Error).message.split("\n")[0]}`);
    }
  }
  return opened = {
    missing: `OpenBLAS not found (apt-get install libopenblas0-openmp, or set BERTFUSE_BLAS to its path)${
      tried.length ? `; ${tried.join("; ")}` : ""
    }`,
  };
}

/** A GEMM prepared for one plan: every address and argument fixed, so a step only calls. */
export interface BlasCall {
  /** The descriptor run() passes by address (held here so that it lives as long as the call). */
  readonly words: BigInt64Array;
  run(): void;
}

/** Whether sgemm can run the call (f32 operands and result); else the template kernel runs it. */
export const blasCan = (g: PlanGemm) => g.a.dtype === "f32" && g.b.dtype === "f32" && g.d.dtype === "f32";

/**
 * The call with operand addresses from `addressOf` (the buffer's first byte) plus the descriptor's
 * offsets, as the descriptor pool.c `bf_gemm` reads: transposes, m, n, k, the three leading
 * dimensions, the batch, then A, B and D per batch entry. `own`: on the backend's sgemm, not OpenBLAS's.
 */
export function blasCallOf(
  pool: Pool,
  g: PlanGemm,
  addressOf: (buffer: number) => bigint,
  kernel: string,
  own: boolean,
): BlasCall {
  if (!blasCan(g)) throw new CpuError(`kernel ${kernel}: BLAS GEMM needs f32 operands`);
  // Batch entry β of group o = ⌊β / inner⌋ (plan/plan.ts): one sgemm per entry, groups or not.
  const inner = g.batch / (g.outer ?? 1);
  const at = (o: PlanGemm["a"], q: number) =>
    addressOf(o.buffer) +
    BigInt((o.offset + Math.floor(q / inner) * (o.outerStride ?? 0) + (q % inner) * o.batchStride) * 4);
  const ta = g.a.trans ? CBLAS_TRANS : CBLAS_NO_TRANS, tb = g.b.trans ? CBLAS_TRANS : CBLAS_NO_TRANS;
  const desc = new BigInt64Array([
    ...[ta, tb, g.m, g.n, g.k, g.a.ld, g.b.ld, g.d.ld, g.batch].map(BigInt),
    ...Array.from({ length: g.batch }, (_, q) => [at(g.a, q), at(g.b, q), at(g.d, q)]).flat(),
  ]);
  const ptr = Deno.UnsafePointer.of(desc);
  return {
    words: desc,
    run() {
      if (pool.lib.symbols.bf_gemm(ptr, own ? 1 : 0) !== 0) {
        throw new CpuError(`kernel ${kernel}: the CPU thread pool has no BLAS`);
      }
    },
  };
}
