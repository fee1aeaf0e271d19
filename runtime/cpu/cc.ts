/**
 * The system C compiler, found once per process: `$CC` or `cc`. Kernels are compiled with
 * `-O3 -march=native -fopenmp-simd -shared -fPIC` into shared libraries that the executor loads with
 * Deno.dlopen. Libraries are cached on disk by SHA-256 of the compiler's version line, the flags and the
 * source (`$BERTFUSE_CACHE/cpu`, default ~/.cache/bertfuse/cpu), written to a temporary name and renamed
 * so that a crash or a concurrent process never leaves a half-written library under a real key. The
 * cache is an optimization: failing to write it costs a compile, never a run.
 */
import { createHash } from "node:crypto";
import { CpuCacheError, CpuError, CpuUnavailableError } from "./cpu_errors.ts";

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

/** An environment variable, or undefined when unset or not readable (no --allow-env). */
export function env(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
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

export function cpuCacheDir(): string {
  const explicit = env("BERTFUSE_CACHE");
  if (explicit) return `${explicit.replace(/\/+$/, "")}/cpu`;
  const xdg = env("XDG_CACHE_HOME"), home = env("HOME");
  // Without HOME, a folder of this user's own under /tmp, not one every user shares.
  return `${xdg ? xdg : home ? `${home}/.cache` : `/tmp/bertfuse-${myIds()?.uid ?? "user"}`}/bertfuse/cpu`;
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
  const dir = cpuCacheDir();
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

function cacheKey(cc: CCompiler, source: string, link: readonly string[]): string {
  const h = createHash("sha256");
  for (const part of [KEY_VERSION, cc.version, ...CC_FLAGS, ...link, source]) {
    const bytes = new TextEncoder().encode(part);
    h.update(`${bytes.length}:`);
    h.update(bytes);
  }
  return h.digest("hex");
}

/** Counts of the last compiles, for tests and DEBUG output. */
export const cacheStats = { hits: 0, misses: 0 };

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
  const dir = cpuCacheDir();
  const path = `${dir}/${cacheKey(cc, source, link)}.so`;
  if (cachedIntact(dir, path)) {
    cacheStats.hits++;
    return path;
  }
  cacheStats.misses++;
  const tag = `${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`;
  let out: Deno.CommandOutput;
  let src = "", tmp = "";
  try {
    Deno.mkdirSync(dir, { recursive: true, mode: 0o700 });
    src = `${dir}/${tag}.c`;
    tmp = `${path}.tmp-${tag}`;
  } catch {
    // An unwritable cache: build in a temporary folder and leave the library there for this process.
    const t = Deno.makeTempDirSync({ prefix: "bertfuse-cpu-" });
    src = `${t}/kernels.c`;
    tmp = `${t}/kernels.so`;
  }
  Deno.writeTextFileSync(src, source);
  try {
    out = await new Deno.Command(cc.command, {
      // -lmvec: the vector variants of expf/logf/tanhf that vectorized loops call (c_prelude.ts).
      args: [...CC_FLAGS, "-o", tmp, src, ...link, "-lmvec", "-lm"],
      stdout: "piped",
      stderr: "piped",
    }).output();
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
  if (!tmp.startsWith(dir)) return tmp;
  try {
    // The hash first: a library in the cache without its hash beside it is never loaded.
    Deno.writeTextFileSync(`${path}.sha256.tmp-${tag}`, sha256(Deno.readFileSync(tmp)));
    Deno.renameSync(`${path}.sha256.tmp-${tag}`, `${path}.sha256`);
    Deno.renameSync(tmp, path);
    return path;
  } catch {
    return tmp;
  }
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

/** This process's user and group, from /proc/self (Deno.uid() would need --allow-sys); undefined off Linux. */
function myIds(): { uid: number | null; gid: number | null } | undefined {
  try {
    const info = Deno.statSync("/proc/self");
    return { uid: info.uid, gid: info.gid };
  } catch {
    return undefined;
  }
}

/**
 * Whether a cached library may be loaded: the folder and the file are ours and nobody else may write them
 * (else CpuError: code another local user could plant is never run, e.g. in a shared /tmp fallback), and
 * the file's SHA-256 is the one recorded when it was built (else it is rebuilt: a damaged or planted
 * entry with no matching hash is a miss).
 */
function cachedIntact(dir: string, path: string): boolean {
  let file: Deno.FileInfo;
  try {
    file = Deno.statSync(path);
  } catch {
    return false; // a miss
  }
  const me = myIds();
  for (const [what, info] of [[dir, Deno.statSync(dir)], [path, file]] as const) {
    const foreign = me !== undefined && info.uid !== me.uid;
    // Group-writable is fine for the user's own group (umask 002 with a private group per user).
    const writable = (info.mode ?? 0) & (me !== undefined && info.gid === me.gid ? 0o002 : 0o022);
    if (foreign || writable !== 0) {
      throw new CpuCacheError(
        `kernel cache ${what} is ${foreign ? "owned by another user" : "writable by others"}: refusing to ` +
          `load code from it (chmod go-w it, or set BERTFUSE_CACHE to a folder of your own)`,
      );
    }
  }
  try {
    return file.size > 0 &&
      Deno.readTextFileSync(`${path}.sha256`).trim() === sha256(Deno.readFileSync(path));
  } catch {
    return false;
  }
}
