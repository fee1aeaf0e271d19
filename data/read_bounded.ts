/**
 * A user's input file read whole, bounded: a regular file over the bound is refused by its size, a pipe or a
 * device is read in pieces up to it (/dev/zero and /dev/urandom never end: read whole they took 9 GB in 12 s).
 * The default bound is what one JavaScript string holds: V8's longest has 2^29 - 24 characters.
 */
export const MAX_TEXT_BYTES = 2 ** 29 - 2 ** 20;
export const STDIN = ["-", "/dev/stdin"]; // read as Deno.stdin: Deno's permissions open no device file
// As model_io/outputs.ts ioCause words it; not imported from there: the browser bundle reads this module.
const DEVICE = "a /dev, /proc or /sys path, closed by Deno's permissions";

/** How the caller words a failure: its error class, and what the file is ("vocab", "SQuAD", "input"). */
export interface Reading {
  what: string;
  fail: (message: string) => Error;
  budget?: number;
  /** The message after the path past the budget; `first` sees a pipe's first piece before more is read. */
  tooBig?: string;
  first?: (piece: Uint8Array) => void;
}

export async function readBounded(path: string, r: Reading): Promise<Uint8Array> {
  const budget = r.budget ?? MAX_TEXT_BYTES;
  const tooBig = () =>
    r.fail(`${r.what} ${path}: ${r.tooBig ?? `over ${budget >> 20} MiB, the most one run reads`}`);
  const parts: Uint8Array[] = [];
  let n = 0;
  try {
    const info = STDIN.includes(path) ? undefined : await Deno.stat(path);
    if (info?.isDirectory) throw r.fail(`${r.what} file ${path} is a directory`);
    if (info?.isFile && info.size > budget) throw tooBig();
    if (info?.isFile) return await Deno.readFile(path);
    for await (const piece of info ? (await Deno.open(path)).readable : Deno.stdin.readable) {
      if (n === 0) r.first?.(piece);
      parts.push(piece);
      if ((n += piece.length) > budget) throw tooBig();
    }
  } catch (e) {
    // The file system's errors say so in the caller's words; the caller's own (fail, first) pass through.
    if (!(e instanceof Error) || !Object.values(Deno.errors).some((c) => e instanceof c)) throw e;
    if (e instanceof Deno.errors.NotFound) throw r.fail(`${r.what} file not found: ${path}`);
    const why = e instanceof Deno.errors.NotCapable ? `${DEVICE}; read standard input as -` : e.message;
    throw r.fail(`cannot read ${r.what} file ${path}: ${why}`);
  }
  return new Uint8Array(await new Blob(parts as BlobPart[]).arrayBuffer());
}

/** A UTF-8 text file (a leading byte-order mark dropped), read as readBounded reads it. */
export async function readUtf8(path: string, r: Reading): Promise<string> {
  const bytes = await readBounded(path, r);
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes); // a byte-order mark is dropped
  } catch {
    throw r.fail(`${path}: not UTF-8 text`);
  }
}
