/**
 * `metrics.jsonl`: one JSON object per logged step, appended and handed to the OS line by line, so a
 * crash loses at most the line being written and `tail -f` shows progress as it happens.
 *
 * Resume: the run restarts from a checkpoint at step S, so the lines logged after S describe steps that
 * will be run again. Opening with `resumeStep: S` keeps the lines with step <= S (and drops a torn last
 * line) by rewriting the file atomically, then appends; the file ends up as if the run had never stopped.
 *
 * Values JSON cannot hold (NaN, Infinity: a diverged loss) are written as null, which is what
 * JSON.stringify does; a null loss in the log means "not a finite number".
 */
import { dirname } from "node:path";
import { io, ioCause, isIoError, OutputError, writeFileAtomic } from "../model_io/outputs.ts";

export interface MetricsRecord {
  /** Training step this line describes; lines are in increasing step order. */
  step: number;
  [key: string]: unknown;
}

export class MetricsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MetricsError";
  }
}

export interface MetricsOpenOptions {
  /**
   * Continue a run from this step: keep lines with step <= resumeStep and append after them. Without it
   * the file is started afresh (a new run).
   */
  resumeStep?: number;
}

export class MetricsWriter {
  #file: Deno.FsFile | undefined;
  #lastStep: number;

  private constructor(readonly path: string, file: Deno.FsFile, lastStep: number) {
    this.#file = file;
    this.#lastStep = lastStep;
  }

  static async open(path: string, opts: MetricsOpenOptions = {}): Promise<MetricsWriter> {
    let lastStep = -Infinity;
    if (opts.resumeStep !== undefined) {
      const r = opts.resumeStep;
      if (!Number.isSafeInteger(r) || r < 0) {
        throw new MetricsError(`${path}: resume step ${r} is not a count`);
      }
      const kept = (await readMetrics(path, { tolerateTornLastLine: true })).filter((m) => m.step <= r);
      const text = kept.map((m) => JSON.stringify(m) + "\n").join("");
      // Rewritten via a temporary file and a rename: a crash here leaves the old file or the new one.
      await writeFileAtomic(path, text);
      lastStep = kept.at(-1)?.step ?? -Infinity;
    } else {
      await io(path, "write", () => Deno.mkdir(dirname(path), { recursive: true }));
      await io(path, "write", () => Deno.writeTextFile(path, ""));
    }
    const file = await io(path, "open", () => Deno.open(path, { append: true }));
    return new MetricsWriter(path, file, lastStep);
  }

  /** Appends one line. Steps must increase (a repeated or earlier step is a trainer bug). */
  write(record: MetricsRecord): void {
    if (!this.#file) throw new MetricsError(`${this.path}: written after close`);
    if (!Number.isSafeInteger(record.step) || record.step < 0) {
      throw new MetricsError(`${this.path}: step ${record.step} is not a count`);
    }
    if (record.step <= this.#lastStep) {
      throw new MetricsError(`${this.path}: step ${record.step} logged after step ${this.#lastStep}`);
    }
    const bytes = new TextEncoder().encode(JSON.stringify(record) + "\n");
    // One write call per line on an O_APPEND file: the line goes to the OS whole, with no user-space buffer.
    try {
      for (let off = 0; off < bytes.length;) off += this.#file.writeSync(bytes.subarray(off));
    } catch (e) {
      // A full disk: Deno's message for a write to an open file names no path.
      throw isIoError(e) ? new OutputError(`${this.path}: cannot write (${ioCause(e)})`) : e;
    }
    this.#lastStep = record.step;
  }

  /** fsync, e.g. when a checkpoint is saved, so the log is as durable as the checkpoint. */
  async sync(): Promise<void> {
    if (this.#file) await io(this.path, "write", () => this.#file!.sync());
  }

  close(): void {
    this.#file?.close();
    this.#file = undefined;
  }
}

/**
 * Reads metrics.jsonl (missing file: no records). A line that is not a JSON object with a numeric step is
 * an error naming the line, except a torn last line (no newline) when `tolerateTornLastLine` is set.
 */
export async function readMetrics(
  path: string,
  opts: { tolerateTornLastLine?: boolean } = {},
): Promise<MetricsRecord[]> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return [];
    throw e;
  }
  const lines = text.split("\n");
  const torn = lines.pop(); // "" when the file ends with a newline
  const out: MetricsRecord[] = [];
  lines.forEach((line, i) => {
    if (line.trim() === "") return;
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      throw new MetricsError(`${path}:${i + 1}: not valid JSON`);
    }
    const rec = v as MetricsRecord;
    if (typeof v !== "object" || v === null || Array.isArray(v) || !Number.isSafeInteger(rec.step)) {
      throw new MetricsError(`${path}:${i + 1}: not an object with an integer "step"`);
    }
    out.push(rec);
  });
  if (torn && !opts.tolerateTornLastLine) {
    throw new MetricsError(`${path}:${lines.length + 1}: last line is incomplete (no newline)`);
  }
  return out;
}
