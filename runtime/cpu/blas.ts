/**
 * GEMMs on the CPU through oneDNN's `dnnl_sgemm` or OpenBLAS's cblas_sgemm, driven by the same library-call
 * descriptors the CUDA runtime hands cuBLASLt (plan/plan.ts PlanGemm): one sgemm per batch entry, f32 operands
 * only (f16/bf16 GEMMs run as the template kernel). Opened once per process, single-threaded: the thread pool
 * (pool.c `bf_gemm`) runs one sgemm per block, so GEMMs and kernels share one set of threads (where the
 * libraries are found: DESIGN.md, notes: runtime/cpu/blas.ts). Without either the same calls run on the
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
const ONEDNN_SYMBOLS = {
  dnnl_version: { parameters: [], result: "pointer" },
  dnnl_get_effective_cpu_isa: { parameters: [], result: "i32" },
} as const;

export interface Blas {
  readonly path: string;
  /** The library's configuration line (OpenBLAS: version, core, threading; oneDNN: its version). */
  readonly config: string;
  /** The kernels it runs (OpenBLAS's core, its own choice or OPENBLAS_CORETYPE's; oneDNN's ISA), for records. */
  readonly corename: string;
}

const CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112;

/** OpenBLAS's sonames: the plain build, and the pthread/OpenMP ones some distributions name apart. */
const OPENBLAS = /^libopenblas[po]?\.so(\.\d+)*$/;
/** oneDNN's (Debian's libdnnl2 / libdnnl3). */
const ONEDNN = /^libdnnl\.so(\.\d+)*$/;
/** dnnl_cpu_isa_t values (oneDNN 2.x and 3.x dnnl_types.h) the benchmark records by name. */
const ISA_NAMES = "avx2 avx512_core avx512_core_vnni avx512_core_bf16 avx512_core_amx".split(" ");
const ISA: Record<number, string> = Object.fromEntries(
  [0x7, 0x27, 0x67, 0xe7, 0x3e7].map((v, i) => [v, ISA_NAMES[i]]),
);

/** Paths a library may be at, best first (runtime/library_finder.ts searches the folders). */
function candidates(re: RegExp, explicit?: string): string[] {
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
  const found = [...variants, ...dirs].map((d) => firstMatch([d], re)).filter((p) => p !== null);
  return explicit ? [explicit] : [...new Set(found)];
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

type Found = Blas | { missing: string };
const opened = new Map<"onednn" | "openblas", Found>();
const NAME = { onednn: "oneDNN", openblas: "OpenBLAS" },
  PACKAGE = { onednn: "libdnnl2", openblas: "libopenblas0-openmp" };

/** The library's configuration line and kernels (OpenBLAS single-threaded from its loading on). */
function describe(kind: "onednn" | "openblas", path: string): Omit<Blas, "path"> {
  if (kind === "onednn") {
    const lib = Deno.dlopen(path, ONEDNN_SYMBOLS), isa = lib.symbols.dnnl_get_effective_cpu_isa();
    const v = new Deno.UnsafePointerView(lib.symbols.dnnl_version()!);
    return {
      config: `oneDNN ${v.getInt32(0)}.${v.getInt32(4)}.${v.getInt32(8)}`,
      corename: ISA[isa] ?? `isa 0x${isa.toString(16)}`,
    };
  }
  const lib = withEnv("OPENBLAS_NUM_THREADS", "1", () => Deno.dlopen(path, SYMBOLS));
  lib.symbols.openblas_set_num_threads(1);
  const text = (p: Deno.PointerValue, none: string) =>
    p ? new Deno.UnsafePointerView(p).getCString().trim() : none;
  return {
    config: text(lib.symbols.openblas_get_config(), "OpenBLAS"),
    corename: text(lib.symbols.openblas_get_corename(), "unknown"),
  };
}

/**
 * oneDNN or OpenBLAS, opened once per process, or why not (one line). The CPU backend prefers oneDNN: its sgemm
 * ran the pool's blocks of BERT-base's GEMMs 13-21 % faster at 128 rows (DESIGN.md, notes: runtime/cpu/blas.ts).
 * `BERTFUSE_BLAS`: none, onednn or openblas (that library alone), or a library's path (its kind by its name).
 */
export function openGemmLibrary(kind: "onednn" | "openblas"): Found {
  const known = opened.get(kind), want = env("BERTFUSE_BLAS");
  const path = want && !["none", "onednn", "openblas"].includes(want) ? want : undefined;
  if (known) return known;
  const wanted = path ? (ONEDNN.test(path.slice(path.lastIndexOf("/") + 1)) ? "onednn" : "openblas") : want;
  if (want && wanted !== kind) {
    return set(kind, { missing: `${NAME[kind]} not used (BERTFUSE_BLAS=${want})` });
  }
  const tried: string[] = [];
  for (const p of candidates(kind === "onednn" ? ONEDNN : OPENBLAS, path)) {
    try {
      return set(kind, { path: p, ...describe(kind, p) });
    } catch (e) {
      tried.push(`${p}: ${(e as Error).message.split("\n")[0]}`); // absent, another architecture, a dependency missing
    }
  }
  const how = `apt-get install ${PACKAGE[kind]}, or set BERTFUSE_BLAS to its path`;
  return set(kind, { missing: `${NAME[kind]} not found (${how})${tried.map((t) => `; ${t}`).join("")}` });
}

const set = (kind: "onednn" | "openblas", found: Found) => (opened.set(kind, found), found);

/** A GEMM prepared for one plan: every address and argument fixed, so a step only calls. */
export interface BlasCall {
  /** The descriptor run() passes by address (held here so that it lives as long as the call). */
  readonly words: BigInt64Array;
  run(): void;
}

/** What runs a GEMM's blocks: pool.c's engine numbers. */
export const GEMM_ENGINES = { openblas: 0, own: 1, onednn: 2 } as const;
export type GemmEngine = keyof typeof GEMM_ENGINES;

/** Whether sgemm can run the call (f32 operands and result); else the template kernel runs it. */
export const blasCan = (g: PlanGemm) => g.a.dtype === "f32" && g.b.dtype === "f32" && g.d.dtype === "f32";

/**
 * The call with operand addresses from `addressOf` (the buffer's first byte) plus the descriptor's
 * offsets, as the descriptor pool.c `bf_gemm` reads: transposes, m, n, k, the three leading
 * dimensions, the batch, then A, B and D per batch entry, run by `engine`'s sgemm.
 */
export function blasCallOf(
  pool: Pool,
  g: PlanGemm,
  addressOf: (buffer: number) => bigint,
  kernel: string,
  engine: GemmEngine,
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
      if (pool.lib.symbols.bf_gemm(ptr, GEMM_ENGINES[engine]) !== 0) {
        throw new CpuError(`kernel ${kernel}: the CPU thread pool has not loaded ${engine}`);
      }
    },
  };
}
