/**
 * The one disk cache of compiled code (CUDA CUBINs, CPU shared libraries): entries keyed by SHA-256 of
 * everything that determines the binary, under `$BERTFUSE_CACHE/<kind>` (default ~/.cache/bertfuse/<kind>).
 * An entry is loaded only when its folder and file are this user's and nobody else may write them, and its
 * SHA-256 is the one recorded beside it when it was built: code another local user planted, or a damaged
 * file, never runs. Writes go to a temporary name and are renamed, the hash first, so a crash or a
 * concurrent process never leaves a half-written entry under a real key. Failing to write costs a
 * compile, never a run.
 */
import { createHash } from "node:crypto";

/** A cache folder that another user owns or may write: its code is refused, never loaded. */
export class CodeCacheError extends Error {
  override name = "CodeCacheError";
}

/** An environment variable, or undefined when unset or not readable (no --allow-env). */
export function env(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

/** `$BERTFUSE_CACHE/<kind>`, else under XDG_CACHE_HOME or HOME, else a folder of this user's own in /tmp. */
export function codeCacheDir(
  kind: "cuda" | "cpu",
  getEnv: (name: string) => string | undefined = env,
): string {
  const explicit = getEnv("BERTFUSE_CACHE");
  if (explicit) return `${explicit.replace(/\/+$/, "")}/${kind}`;
  const xdg = getEnv("XDG_CACHE_HOME"), home = getEnv("HOME");
  return `${
    xdg ? xdg : home ? `${home}/.cache` : `/tmp/bertfuse-${myIds()?.uid ?? "user"}`
  }/bertfuse/${kind}`;
}

/**
 * SHA-256 (hex) of `parts`, each length-prefixed so that no two different part lists hash the same bytes
 * (a plain join would let "a|b" + "c" collide with "a" + "b|c").
 */
export function hashParts(parts: readonly string[]): string {
  const h = createHash("sha256");
  for (const part of parts) {
    const bytes = new TextEncoder().encode(part);
    h.update(`${bytes.length}:`);
    h.update(bytes);
  }
  return h.digest("hex");
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

const removeQuietly = (path: string) => {
  try {
    Deno.removeSync(path);
  } catch {
    // never created, or already gone
  }
};

export class CodeCache {
  private warned = false;
  hits = 0;
  misses = 0;

  /** `ext`: the entries' file extension (".cubin", ".so"). */
  constructor(readonly dir: string, private readonly ext: string) {}

  path(key: string): string {
    return `${this.dir}/${key}${this.ext}`;
  }

  /** The entry's path when it may be loaded (counted as a hit), else undefined (a miss); see the file comment. */
  lookup(key: string): string | undefined {
    return this.verified(key)?.path;
  }

  /** The entry's bytes when it may be loaded, else null (see lookup): read once, hashed and returned. */
  get(key: string): Uint8Array<ArrayBuffer> | null {
    return this.verified(key)?.bytes ?? null;
  }

  private verified(key: string): { path: string; bytes: Uint8Array<ArrayBuffer> } | undefined {
    const path = this.path(key);
    let file: Deno.FileInfo;
    try {
      file = Deno.statSync(path);
    } catch {
      this.misses++;
      return undefined;
    }
    const me = myIds();
    for (const [what, info] of [[this.dir, Deno.statSync(this.dir)], [path, file]] as const) {
      const foreign = me !== undefined && info.uid !== me.uid;
      // Group-writable is fine for the user's own group (umask 002 with a private group per user).
      const writable = (info.mode ?? 0) & (me !== undefined && info.gid === me.gid ? 0o002 : 0o022);
      if (foreign || writable !== 0) {
        throw new CodeCacheError(
          `kernel cache ${what} is ${
            foreign ? "owned by another user" : "writable by others"
          }: refusing to ` +
            `load code from it (chmod go-w it, or set BERTFUSE_CACHE to a folder of your own)`,
        );
      }
    }
    try {
      const bytes = Deno.readFileSync(path) as Uint8Array<ArrayBuffer>;
      if (file.size > 0 && Deno.readTextFileSync(`${path}.sha256`).trim() === sha256(bytes)) {
        this.hits++;
        return { path, bytes };
      }
    } catch {
      // no hash beside it: never loaded
    }
    this.misses++;
    return undefined;
  }

  /** A fresh name in the cache folder (created, 0700) to build an entry into, or undefined where it cannot be written. */
  scratch(suffix: string): string | undefined {
    try {
      Deno.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      return `${this.dir}/${Deno.pid}-${crypto.randomUUID().slice(0, 8)}${suffix}`;
    } catch {
      return undefined;
    }
  }

  /** Moves a built file (in the cache folder, from `scratch`) in under `key`; its path, or undefined on failure. */
  adopt(key: string, built: string, hash?: string): string | undefined {
    const path = this.path(key), tag = `${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`;
    try {
      // The hash first: an entry without its hash beside it is never loaded.
      Deno.writeTextFileSync(`${path}.sha256.tmp-${tag}`, hash ?? sha256(Deno.readFileSync(built)));
      Deno.renameSync(`${path}.sha256.tmp-${tag}`, `${path}.sha256`);
      Deno.renameSync(built, path);
      return path;
    } catch (e) {
      removeQuietly(`${path}.sha256.tmp-${tag}`);
      this.warnOnce(e);
      return undefined;
    }
  }

  /** Stores `bytes` under `key`. Failures only warn, once. */
  put(key: string, bytes: Uint8Array): void {
    const tmp = this.scratch(".tmp");
    if (tmp === undefined) return this.warnOnce(new Error(`cannot create ${this.dir}`));
    try {
      Deno.writeFileSync(tmp, bytes, { mode: 0o600 });
    } catch (e) {
      removeQuietly(tmp);
      return this.warnOnce(e);
    }
    if (this.adopt(key, tmp, sha256(bytes)) === undefined) removeQuietly(tmp);
  }

  /** Drops a bad entry (one the loader refused), so the next run rebuilds it. */
  remove(key: string): void {
    removeQuietly(this.path(key));
    removeQuietly(`${this.path(key)}.sha256`);
  }

  private warnOnce(e: unknown): void {
    if (this.warned) return;
    this.warned = true;
    console.error(`warning: cannot write the kernel cache in ${this.dir}: ${(e as Error).message}`);
  }
}
