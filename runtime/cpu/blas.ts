/**
 * GEMMs on the CPU through OpenBLAS's cblas_sgemm (Deno FFI), driven by the same library-call
 * descriptors the CUDA runtime hands cuBLASLt (plan/plan.ts PlanGemm, derived once by the compiler's
 * `library-calls` stage): row-major D[β] = op(A[β]) · op(B[β]), alpha 1, beta 0, f32 accumulation. The
 * descriptor's layout is BLAS's own row-major convention (op(X)[i][j] = X[i·ld + j], or X[j·ld + i]
 * transposed), so each batch entry is one cblas_sgemm. sgemm takes f32 operands only: a GEMM with f16 or
 * bf16 operands runs as the template kernel instead.
 *
 * Found in `$BERTFUSE_BLAS` (a path to the library), Debian's OpenMP build (libopenblas0-openmp), the
 * system loader's cache (`ldconfig -p`), then the usual folders; opened once per process with its thread count set once (`$BERTFUSE_CPU_THREADS`, else
 * every core): OpenBLAS keeps one pool for the whole process.
 */
import type { PlanGemm } from "../../plan/plan.ts";
import { CpuError } from "./errors.ts";

const SYMBOLS = {
  cblas_sgemm: {
    parameters: [
      "i32",
      "i32",
      "i32",
      "i32",
      "i32",
      "i32",
      "f32",
      "pointer",
      "i32",
      "pointer",
      "i32",
      "f32",
      "pointer",
      "i32",
    ],
    result: "void",
  },
  openblas_set_num_threads: { parameters: ["i32"], result: "void" },
  openblas_get_config: { parameters: [], result: "pointer" },
} as const;

export interface Blas {
  readonly path: string;
  /** OpenBLAS's configuration line (version, core, threading). */
  readonly config: string;
  readonly lib: Deno.DynamicLibrary<typeof SYMBOLS>;
}

const CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112;

const NAMES = ["libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0", "libopenblaso.so.0"];
const FOLDERS = [
  "/usr/lib/x86_64-linux-gnu",
  "/usr/lib/x86_64-linux-gnu/openblas-pthread",
  "/usr/lib/x86_64-linux-gnu/openblas-openmp",
  "/usr/lib/aarch64-linux-gnu",
  "/usr/lib/aarch64-linux-gnu/openblas-pthread",
  "/usr/lib64",
  "/usr/lib",
  "/usr/local/lib",
  "/opt/OpenBLAS/lib",
];

function env(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

/** Paths OpenBLAS may be at, best first. */
function candidates(): string[] {
  const out: string[] = [];
  const explicit = env("BERTFUSE_BLAS");
  if (explicit) out.push(explicit);
  // The OpenMP build first: it runs on the same libgomp thread pool as our kernels. The pthread build
  // keeps a pool of its own whose threads spin after each GEMM, competing with the next kernel's threads
  // for the cores (measured: the kernel after a GEMM took several times its own CPU time).
  for (const arch of ["x86_64", "aarch64"]) {
    out.push(`/usr/lib/${arch}-linux-gnu/openblas-openmp/libopenblas.so.0`);
  }
  try {
    const r = new Deno.Command("ldconfig", { args: ["-p"], stdout: "piped", stderr: "null" }).outputSync();
    for (const line of new TextDecoder().decode(r.stdout).split("\n")) {
      const m = line.match(/^\s*(libopenblas\S*\.so\S*)\s.*=>\s*(\S+)/);
      if (m) out.push(m[2]);
    }
  } catch {
    // no ldconfig, or no --allow-run: the folders below
  }
  for (const d of FOLDERS) for (const n of NAMES) out.push(`${d}/${n}`);
  return [...new Set(out)];
}

let opened: Blas | { missing: string } | undefined;

/** OpenBLAS, opened once per process, or why not (one line). */
export function openBlas(): Blas | { missing: string } {
  if (opened) return opened;
  const tried: string[] = [];
  for (const path of candidates()) {
    try {
      Deno.statSync(path);
    } catch {
      continue;
    }
    try {
      const lib = Deno.dlopen(path, SYMBOLS);
      const threads = Number(env("BERTFUSE_CPU_THREADS")) || navigator.hardwareConcurrency || 1;
      lib.symbols.openblas_set_num_threads(threads);
      const p = lib.symbols.openblas_get_config();
      const config = p ? new Deno.UnsafePointerView(p).getCString() : "OpenBLAS";
      return opened = { path, config: config.trim(), lib };
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
  run(): void;
}

/** Whether sgemm can run the call (f32 operands and result); else the template kernel runs it. */
export const blasCan = (g: PlanGemm) => g.a.dtype === "f32" && g.b.dtype === "f32" && g.d.dtype === "f32";

/** The call with operand addresses from `addressOf` (the buffer's first byte) plus the descriptor's offsets. */
export function blasCallOf(
  blas: Blas,
  g: PlanGemm,
  addressOf: (buffer: number) => bigint,
  kernel: string,
): BlasCall {
  if (!blasCan(g)) throw new CpuError(`kernel ${kernel}: BLAS GEMM needs f32 operands`);
  // Batch entry β of group o = ⌊β / inner⌋ (plan/plan.ts): one sgemm per entry, groups or not.
  const inner = g.batch / (g.outer ?? 1);
  const ptr = (o: PlanGemm["a"], q: number) =>
    Deno.UnsafePointer.create(
      addressOf(o.buffer) +
        BigInt((o.offset + Math.floor(q / inner) * (o.outerStride ?? 0) + (q % inner) * o.batchStride) * 4),
    );
  const calls = Array.from({ length: g.batch }, (_, q) => [ptr(g.a, q), ptr(g.b, q), ptr(g.d, q)] as const);
  const ta = g.a.trans ? CBLAS_TRANS : CBLAS_NO_TRANS, tb = g.b.trans ? CBLAS_TRANS : CBLAS_NO_TRANS;
  const sgemm = blas.lib.symbols.cblas_sgemm;
  return {
    run() {
      for (const [a, b, d] of calls) {
        sgemm(CBLAS_ROW_MAJOR, ta, tb, g.m, g.n, g.k, 1, a, g.a.ld, b, g.b.ld, 0, d, g.d.ld);
      }
    },
  };
}
