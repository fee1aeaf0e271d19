/**
 * The CPU backend's thread pool (its C is pool.c, next to this file): built with the kernels' compiler and
 * flags, cached like them, opened once per process, its helpers started once (`$BERTFUSE_CPU_THREADS`, else
 * every core). Kernel libraries link it by path, so the loader maps one copy for the process and every
 * kernel shares its threads; GEMMs run through its `bf_gemm`, which calls oneDNN's or OpenBLAS's sgemm
 * single-threaded per block, or the backend's own (sgemm.c, where neither is found); `bf_arena_prepare` faults an
 * arena's pages in.
 */
import { compileLibrary } from "./cc.ts";
import type { CpuContext } from "./cpu_executor.ts";
import { CpuError } from "./cpu_errors.ts";

const SYMBOLS = {
  bf_pool_init: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  bf_pool_threads: { parameters: [], result: "i32" },
  bf_gemm: { parameters: ["pointer", "i32"], result: "i32" },
  bf_arena_prepare: { parameters: ["buffer", "i64"], result: "void" },
} as const;

export interface Pool {
  /** The shared library's path, which kernel libraries link. */
  readonly path: string;
  readonly threads: number;
  readonly lib: Deno.DynamicLibrary<typeof SYMBOLS>;
}

let opened: Promise<Pool> | undefined;

/** The pool, built and started on first use, with the libraries found (the first caller's count). */
export function openPool(ctx: Pick<CpuContext, "cc" | "threads" | "blas" | "onednn">): Promise<Pool> {
  return opened ??= (async () => {
    const read = (file: string) => Deno.readTextFile(new URL(file, import.meta.url));
    const source = `${await read("./pool.c")}\n${await read("./sgemm.c")}`;
    const path = await compileLibrary(ctx.cc, source, "the CPU thread pool (runtime/cpu/pool.c, sgemm.c)");
    const lib = Deno.dlopen(path, SYMBOLS);
    const { threads, blas, onednn } = ctx, text = (s = "") => new TextEncoder().encode(`${s}\0`);
    if (lib.symbols.bf_pool_init(threads, text(blas?.path), text(onednn?.path)) !== 0) {
      throw new CpuError(`the CPU thread pool could not open ${[blas?.path, onednn?.path].join(" or ")}`);
    }
    return { path, threads: lib.symbols.bf_pool_threads(), lib };
  })();
}
