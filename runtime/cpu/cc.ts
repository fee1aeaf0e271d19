/**
 * The system C compiler, found once per process: `$CC` or `cc`. Kernels are compiled with
 * `-O3 -march=native -fopenmp-simd -shared -fPIC` into shared libraries that the executor loads with
 * Deno.dlopen, kept in the disk cache of compiled code (runtime/code_cache.ts, `$BERTFUSE_CACHE/cpu`) by
 * SHA-256 of the compiler's version line, the flags and the source.
 */
import { CodeCache, codeCacheDir, env, hashParts } from "../code_cache.ts";
import { CpuError, CpuUnavailableError } from "./cpu_errors.ts";

// -fno-math-errno: libm calls that set no errno are pure, so loop-invariant ones (the optimizer's bias
// corrections) leave their loops, sqrtf is one instruction, and loops calling expf/logf/tanhf vectorize
// with libmvec's variants. Results are unchanged (only errno would be).
// -fopenmp-simd: OpenMP's simd loops only; kernels run in parallel on our own pool (pool.c), not
// libgomp's.
export const CC_FLAGS: readonly string[] = [
  "-O3",
  "-march=native",
  "-fopenmp-simd",
  "-fno-math-errno",
  "-shared",
  "-fPIC",
  "-std=gnu11",
  "-pthread",
  // Never unmapped (nor the pool they link): the pool's idle threads spin in its code for a while after
  // each kernel, and a library unloaded at process exit under a spinning thread crashed the exit
  // (SIGSEGV, exit status 139; seen with libgomp's threads before the pool).
  "-Wl,-z,nodelete",
];

/** Bumped when the key's composition or the library ABI changes. */
const KEY_VERSION = "bertfuse-cpu-kernel-v3";

export interface CCompiler {
  /** The command (`cc`, or `$CC`). */
  readonly command: string;
  /** The first line of `cc --version`. */
  readonly version: string;
}

/** The C compiler, or CpuUnavailableError in one line saying why there is none. */
export function findCompiler(): CCompiler {
  const command = env("CC") || "cc";
  let out: Deno.CommandOutput;
  try {
    out = new Deno.Command(command, { args: ["--version"], stdout: "piped", stderr: "piped" }).outputSync();
  } catch (e) {
    if (e instanceof Deno.errors.NotCapable || e instanceof Deno.errors.PermissionDenied) {
      throw new CpuUnavailableError(`running the C compiler '${command}' needs --allow-run`);
    }
    throw new CpuUnavailableError(
      `no C compiler: '${command}' not found (install gcc, e.g. apt-get install gcc, or set CC)`,
    );
  }
  if (!out.success) throw new CpuUnavailableError(`the C compiler '${command} --version' failed`);
  const version = new TextDecoder().decode(out.stdout).split("\n")[0].trim();
  return { command, version };
}

/** Whether this process has been granted writing `path` (asked without a prompt). */
function mayWrite(path: string): boolean {
  try {
    return Deno.permissions.querySync({ name: "write", path }).state === "granted";
  } catch {
    return false;
  }
}

/**
 * Checks, when the backend opens, that kernels can be built: in the cache folder (created here), else in
 * a temporary folder (compileLibrary's fallback). Otherwise CpuUnavailableError in one line naming the
 * folder and the grant, so a command fails before it starts rather than at its first compile.
 */
export function checkBuildDir(): void {
  const dir = codeCacheDir("cpu");
  let why = "no --allow-write for it";
  if (mayWrite(dir)) {
    try {
      Deno.mkdirSync(dir, { recursive: true, mode: 0o700 });
      return;
    } catch (e) {
      why = (e as Error).message.split("\n")[0];
    }
  }
  if (mayWrite(env("TMPDIR") || "/tmp")) return;
  throw new CpuUnavailableError(
    `cannot write the kernel cache ${dir} (${why}): grant --allow-write=${dir} ` +
      `(deno task serve grants $HOME/.cache/bertfuse) or set BERTFUSE_CACHE to a folder it may write`,
  );
}

/**
 * The path of a shared library built from `source`: from the cache when there, else compiled (the
 * compiler's own messages are in the error, with the first lines of its output). `link`: shared
 * libraries it needs, by path (part of the cache key).
 */
export async function compileLibrary(
  cc: CCompiler,
  source: string,
  what: string,
  link: readonly string[] = [],
): Promise<string> {
  const cache = new CodeCache(codeCacheDir("cpu"), ".so");
  const key = hashParts([KEY_VERSION, cc.version, ...CC_FLAGS, ...link, source]);
  const cached = cache.lookup(key);
  if (cached !== undefined) {
    return cached;
  }
  // An unwritable cache: build in a temporary folder and leave the library there for this process.
  const scratch = cache.scratch("") ?? `${Deno.makeTempDirSync({ prefix: "bertfuse-cpu-" })}/kernels`;
  const src = `${scratch}.c`, built = `${scratch}.so`;
  let out: Deno.CommandOutput;
  Deno.writeTextFileSync(src, source);
  try {
    out = await new Deno.Command(cc.command, {
      // -lmvec: the vector variants of expf/logf/tanhf that vectorized loops call (c_prelude.ts).
      args: [...CC_FLAGS, "-o", built, src, ...link, "-lmvec", "-lm"],
      stdout: "piped",
      stderr: "piped",
      // Its own session (spawn: output() ignores `detached`), out of reach of a terminal's Ctrl-C (it failed serve).
      detached: true,
    }).spawn().output();
  } finally {
    try {
      Deno.removeSync(src);
    } catch {
      // already gone
    }
  }
  if (!out.success) {
    const msg = new TextDecoder().decode(out.stderr).split("\n").filter((l) => l.trim()).slice(0, 8).join(
      "\n",
    );
    throw new CpuError(`${cc.command} failed compiling ${what}:\n${msg}`);
  }
  return built.startsWith(cache.dir) ? cache.adopt(key, built) ?? built : built;
}
