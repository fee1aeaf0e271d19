/**
 * The on-disk cache of compiled kernels: NVRTC takes tens to hundreds of milliseconds per kernel, and a
 * BERT training plan has hundreds, so CUBINs are kept under `$BERTFUSE_CACHE` (default
 * ~/.cache/bertfuse/cuda), one file per SHA-256 of everything that determines the binary: the source, the
 * architecture, the NVRTC version and the compile options. Files are written to a temporary name and
 * renamed, so a crash or a concurrent process never leaves a half-written CUBIN under a real key. The
 * cache is an optimization only: failing to read or write it costs a compile, never a run.
 */
import { createHash } from "node:crypto";

/** Bumped when the key's composition changes, so old entries are never mistaken for new ones. */
const KEY_VERSION = "bertfuse-cuda-kernel-v1";

export interface CacheKeyParts {
  readonly source: string;
  /** e.g. "sm_90" */
  readonly arch: string;
  /** e.g. "13.0" */
  readonly nvrtcVersion: string;
  readonly options: readonly string[];
}

/**
 * SHA-256 (hex) of the parts, each length-prefixed so that no two different part lists hash the same
 * bytes (a plain join would let "a|b" + "c" collide with "a" + "b|c").
 */
export function kernelCacheKey(p: CacheKeyParts): string {
  const h = createHash("sha256");
  for (
    const part of [KEY_VERSION, p.arch, p.nvrtcVersion, String(p.options.length), ...p.options, p.source]
  ) {
    const bytes = new TextEncoder().encode(part);
    h.update(`${bytes.length}:`);
    h.update(bytes);
  }
  return h.digest("hex");
}

export function defaultCacheDir(env: (name: string) => string | undefined = safeEnv): string {
  const explicit = env("BERTFUSE_CACHE");
  if (explicit) return explicit.replace(/\/+$/, "");
  const xdg = env("XDG_CACHE_HOME");
  const home = env("HOME");
  const base = xdg ? xdg : home ? `${home}/.cache` : "/tmp";
  return `${base}/bertfuse/cuda`;
}

function safeEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

export class KernelCache {
  private warned = false;
  hits = 0;
  misses = 0;

  constructor(readonly dir: string = defaultCacheDir()) {}

  path(key: string): string {
    return `${this.dir}/${key}.cubin`;
  }

  /** The cached CUBIN for `key`, or null (absent, unreadable or empty). */
  get(key: string): Uint8Array<ArrayBuffer> | null {
    try {
      const bytes = Deno.readFileSync(this.path(key));
      if (bytes.byteLength > 0) {
        this.hits++;
        return bytes as Uint8Array<ArrayBuffer>;
      }
    } catch {
      // a miss
    }
    this.misses++;
    return null;
  }

  /** Stores a CUBIN atomically (temp file in the same folder, then rename). Failures only warn, once. */
  put(key: string, cubin: Uint8Array): void {
    const tmp = `${this.path(key)}.tmp-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`;
    try {
      Deno.mkdirSync(this.dir, { recursive: true });
      Deno.writeFileSync(tmp, cubin);
      Deno.renameSync(tmp, this.path(key));
    } catch (e) {
      try {
        Deno.removeSync(tmp);
      } catch {
        // never created
      }
      if (!this.warned) {
        this.warned = true;
        console.error(`warning: cannot write the CUDA kernel cache in ${this.dir}: ${(e as Error).message}`);
      }
    }
  }

  /** Drops a bad entry (one the driver refused to load), so the next run recompiles it. */
  remove(key: string): void {
    try {
      Deno.removeSync(this.path(key));
    } catch {
      // already gone
    }
  }
}
