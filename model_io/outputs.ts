/**
 * The one rule for what a command writes, used by every command:
 *
 * - An output never replaces an input, nor anything the command did not create. A file or folder already
 *   at the output path is replaced only when it is recognisably a previous output of ours (each caller
 *   says how: a manifest, a plan.json, safetensors metadata); otherwise the command refuses in one line
 *   and nothing is written.
 * - Writes are atomic: a file is written beside its target under a temporary name, synced and renamed in;
 *   a folder is assembled under a temporary name and renamed in. A failure leaves no partial output.
 * - A lock file in an output folder stops a second writer, with a message naming the first (pid, host,
 *   start time); the lock of a process that is gone is recognised and taken over.
 * - Every I/O failure becomes an OutputError naming the path and the cause (full disk, read-only, ...),
 *   which the commands print as one line.
 *
 * This is a floor module (model_io/): it imports nothing of ours, so training/, data/, compiler/ and
 * cli/ can all use it.
 */
import { basename, dirname, join, resolve } from "node:path";

export class OutputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "OutputError";
  }
}

/** errno names of the failures a user's disk can cause, by the number Deno puts in "(os error N)". */
const ERRNO: Record<number, string> = {
  ...{ 1: "operation not permitted", 2: "no such file or folder", 12: "out of memory" },
  ...{ 13: "permission denied", 17: "already exists", 20: "a parent of it is not a folder" },
  ...{ 21: "it is a folder", 27: "file too large", 28: "no space left on device" },
  ...{ 30: "read-only file system", 36: "name too long", 39: "folder not empty", 122: "disk quota exceeded" },
};

/** The cause of an I/O error in a few words ("no space left on device"), from Deno's message. */
export function ioCause(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  const n = /\(os error (\d+)\)/.exec(msg);
  if (n && ERRNO[Number(n[1])]) return ERRNO[Number(n[1])];
  if (/Requires all access/.test(msg)) return "a /dev, /proc or /sys path, closed by Deno's permissions";
  return msg.replace(/\s*\(os error \d+\).*$/s, "").replace(/:\s*(open|write|rename|mkdir|stat)\s.*$/s, "")
    .split("\n")[0].trim() || "I/O error";
}

/** Whether `e` is an error of the file system (as opposed to a bug). */
export function isIoError(e: unknown): boolean {
  return e instanceof Error && (/\(os error \d+\)/.test(e.message) ||
    Object.values(Deno.errors).some((cls) => e instanceof cls && cls !== Deno.errors.NotCapable));
}

/** Runs an I/O action; a file-system failure becomes one OutputError naming `path` and the cause. */
export async function io<T>(path: string, what: string, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (e instanceof OutputError || !isIoError(e)) throw e;
    throw new OutputError(`${path}: cannot ${what} (${ioCause(e)})`);
  }
}

async function lstatOrNull(path: string): Promise<Deno.FileInfo | null> {
  try {
    return await Deno.lstat(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return null;
    throw new OutputError(`${path}: cannot look at it (${ioCause(e)})`);
  }
}

/** The absolute path with symbolic links resolved as far as the path exists (the rest appended). */
export async function realish(path: string): Promise<string> {
  const abs = resolve(path);
  let head = abs;
  const tail: string[] = [];
  while (true) {
    try {
      return join(await Deno.realPath(head), ...tail.reverse());
    } catch {
      const up = dirname(head);
      if (up === head) return abs;
      tail.push(basename(head));
      head = up;
    }
  }
}

const within = (inner: string, outer: string) => inner === outer || inner.startsWith(outer + "/");

export interface OutputRule {
  /** How the output is named in messages, e.g. "--output out.safetensors". */
  label: string;
  /** What the command reads: the output may be none of these, nor inside one that is a folder. */
  inputs?: readonly (string | undefined)[];
  /** Whether what is at the output path now is a previous output of this command (then it is replaced). */
  isOurs?: (path: string) => Promise<boolean>;
  /** What a previous output looks like, for the refusal ("a plan folder of deno task compile"). */
  oursLooksLike?: string;
}

async function checkInputs(path: string, rule: OutputRule): Promise<void> {
  const out = await realish(path);
  for (const input of rule.inputs ?? []) {
    if (input === undefined) continue;
    const inp = await realish(input);
    const st = await lstatOrNull(inp).catch(() => null); // a device (standard input) holds no output
    if (out === inp || (st?.isDirectory && within(out, inp))) {
      throw new OutputError(
        `${rule.label}: would overwrite the input ${input}; choose another path (nothing was written)`,
      );
    }
  }
}

/** Checks a file output before any work: not an input, not a folder, and free or a previous output. */
export async function checkFileOutput(path: string, rule: OutputRule): Promise<void> {
  await checkInputs(path, rule);
  const st = await lstatOrNull(path);
  const parent = await lstatOrNull(dirname(resolve(path)));
  if (parent && !parent.isDirectory) {
    throw new OutputError(`${rule.label}: ${dirname(path)} is a file, not a folder (nothing was written)`);
  }
  if (!st) return;
  if (st.isDirectory) throw new OutputError(`${rule.label}: ${path} is a folder (nothing was written)`);
  if (rule.isOurs && !(await rule.isOurs(path).catch(() => false))) {
    throw new OutputError(
      `${rule.label}: ${path} exists and is not ${
        rule.oursLooksLike ?? "an earlier output of this command"
      }; remove it or choose another path (nothing was written)`,
    );
  }
}

/** Checks a folder output: not an input, not a file, and absent, empty or a previous output of ours. */
export async function checkDirOutput(dir: string, rule: OutputRule): Promise<"absent" | "empty" | "ours"> {
  await checkInputs(dir, rule);
  const st = await lstatOrNull(dir);
  if (!st) return "absent";
  if (!st.isDirectory) {
    throw new OutputError(`${rule.label}: ${dir} is a file, not a folder (nothing was written)`);
  }
  let empty = true;
  await io(dir, "read the folder", async () => {
    for await (const _ of Deno.readDir(dir)) {
      empty = false;
      break;
    }
  });
  if (empty) return "empty";
  if (rule.isOurs && (await rule.isOurs(dir).catch(() => false))) return "ours";
  throw new OutputError(
    `${rule.label}: ${dir} holds files that are not ${
      rule.oursLooksLike ?? "an earlier output of this command"
    }; remove them or choose another folder (nothing was written)`,
  );
}

async function mkdirFor(path: string): Promise<void> {
  const parent = dirname(resolve(path));
  await io(parent, "create the folder", () => Deno.mkdir(parent, { recursive: true }));
}

/**
 * Writes a file atomically: a temporary file beside it, synced, then renamed over it. `content` is the
 * bytes or text, or a function writing to the open temporary file (for outputs too large to hold).
 */
export async function writeFileAtomic(
  path: string,
  content: Uint8Array | string | ((file: Deno.FsFile) => Promise<void>),
): Promise<void> {
  await mkdirFor(path);
  const tmp = join(dirname(resolve(path)), `.${basename(path)}.tmp-${Deno.pid}`);
  try {
    const file = await Deno.open(tmp, { write: true, create: true, truncate: true });
    try {
      if (typeof content === "function") await content(file);
      else {
        const bytes = typeof content === "string" ? new TextEncoder().encode(content) : content;
        for (let off = 0; off < bytes.length;) off += await file.write(bytes.subarray(off));
      }
      await file.sync();
    } finally {
      file.close();
    }
    await Deno.rename(tmp, path);
  } catch (e) {
    await Deno.remove(tmp).catch(() => {});
    if (e instanceof OutputError || !isIoError(e)) throw e;
    throw new OutputError(`${path}: cannot write (${ioCause(e)}); nothing was written`);
  }
}

/**
 * Writes a folder atomically: `fill` writes into a temporary sibling folder, which then replaces `dir`
 * (checked beforehand with checkDirOutput by the caller). Whatever was at `dir` stays if anything fails.
 */
export async function replaceDir(dir: string, fill: (tmp: string) => Promise<void>): Promise<void> {
  const tmp = `${resolve(dir)}.tmp-${Deno.pid}`;
  const old = `${resolve(dir)}.old-${Deno.pid}`;
  let moved = false, stopped: string | undefined;
  // A Ctrl-C or SIGTERM meanwhile is answered once the swap is done or undone: one between its two renames
  // would leave the user's folder under the .old name, and one while filling would leave the .tmp folder.
  const listeners = (["SIGINT", "SIGTERM"] as const).map((s) => [s, () => void (stopped ??= s)] as const);
  listeners.forEach(([s, f]) => Deno.addSignalListener(s, f));
  try {
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
    await mkdirFor(tmp);
    await Deno.mkdir(tmp);
    await fill(tmp);
    if (stopped) throw new OutputError(`${dir}: stopped by ${stopped} while writing; nothing was changed`);
    if (await lstatOrNull(dir)) {
      await Deno.rename(dir, old);
      moved = true;
    }
    await Deno.rename(tmp, dir);
    if (moved) await Deno.remove(old, { recursive: true }).catch(() => {});
  } catch (e) {
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
    if (moved && !(await lstatOrNull(dir))) await Deno.rename(old, dir).catch(() => {});
    if (e instanceof OutputError || !isIoError(e)) throw e;
    throw new OutputError(`${dir}: cannot write (${ioCause(e)}); nothing was changed`);
  } finally {
    listeners.forEach(([s, f]) => Deno.removeSignalListener(s, f));
  }
  if (stopped) throw new OutputError(`${dir}: written, then stopped by ${stopped}`);
}

// ---------------------------------------------------------------------------------------------------
// The lock of an output folder

export const LOCK_FILE = ".bertfuse.lock";

interface LockRecord {
  pid: number;
  host: string;
  started: string;
  command: string;
}

function hostName(): string {
  // Deno.hostname() would need --allow-sys, and /proc is closed to --allow-read; /etc/hostname is not.
  try {
    return Deno.readTextFileSync("/etc/hostname").trim() || "localhost";
  } catch {
    return "localhost";
  }
}

export interface Lock {
  readonly path: string;
  release(): Promise<void>;
}

/**
 * Takes the lock of an output folder (which must exist). The lock is an exclusive flock on a file that
 * names its holder: the system releases it when the holder dies however it dies, so a lock file left by
 * a dead process is recognised (it is not locked) and taken over (`onStale` is told); a live holder is
 * refused with its pid, host and start time. Works without reading /proc (closed to --allow-read).
 */
export async function acquireLock(
  dir: string,
  command: string,
  onStale?: (msg: string) => void,
): Promise<Lock> {
  const path = join(dir, LOCK_FILE);
  const me: LockRecord = { pid: Deno.pid, host: hostName(), started: new Date().toISOString(), command };
  for (let attempt = 0; attempt < 3; attempt++) {
    const file = await io(
      path,
      "open the lock file",
      () => Deno.open(path, { read: true, write: true, create: true }),
    );
    let mine = false;
    try {
      if (!(await file.tryLock(true))) {
        const held = await readLock(path);
        const who = held
          ? `pid ${held.pid} on ${held.host}, started ${held.started} (${held.command})`
          : "another process";
        throw new OutputError(`${dir} is in use by another run: ${who}; wait for it to finish`);
      }
      // A holder that released between our open and lock may have removed the file: then lock the new one.
      const [a, b] = [await file.stat(), await Deno.stat(path).catch(() => undefined)];
      if (!b || a.ino !== b.ino) continue;
      const previous = await readLock(path);
      if (previous) {
        onStale?.(
          `${path}: taking over the lock of pid ${previous.pid} (started ${previous.started}), no longer running`,
        );
      }
      await file.truncate(0);
      const bytes = new TextEncoder().encode(JSON.stringify(me) + "\n");
      for (let off = 0; off < bytes.length;) off += await file.write(bytes.subarray(off));
      mine = true;
      return {
        path,
        release: async () => {
          await Deno.remove(path).catch(() => {});
          await file.unlock().catch(() => {});
          file.close();
        },
      };
    } finally {
      if (!mine) file.close();
    }
  }
  throw new OutputError(`${path}: another run took the lock at the same moment; try again`);
}

async function readLock(path: string): Promise<LockRecord | undefined> {
  try {
    const v = JSON.parse(await Deno.readTextFile(path));
    return typeof v?.pid === "number" && typeof v?.host === "string" ? v : undefined;
  } catch {
    return undefined;
  }
}
