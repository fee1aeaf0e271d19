/**
 * Training progress on stderr. On a terminal: one line redrawn in place (a bar, step/total, loss, MLM
 * accuracy, sequences/s, loss scale, learning rate, ETA), at most every `intervalMs` (100 ms). Elsewhere
 * (a log file, CI): the same fields as a plain line every `intervalMs` (10 s), so logs stay readable.
 * Other messages go through `log()`, which clears the bar first so the two never mix on one line.
 */

export interface ProgressStats {
  /** Steps completed. */
  step: number;
  loss?: number;
  /** In [0, 1]. */
  mlmAccuracy?: number;
  /** A fine-tuning task's batch accuracy, in [0, 1]: labelled "acc", as it is no masked-LM accuracy. */
  accuracy?: number;
  seqPerSec?: number;
  lossScale?: number;
  learningRate?: number;
}

export interface ProgressOptions {
  total: number;
  /** Default: whether stderr is a terminal. */
  tty?: boolean;
  /** Default: write to stderr. */
  write?: (text: string) => void;
  /** Minimum time between redraws (TTY, default 100) or lines (otherwise, default 10000), in ms. */
  intervalMs?: number;
  /** Terminal width (default: Deno.consoleSize, else 100). */
  columns?: () => number;
  /** Clock in ms (tests). */
  now?: () => number;
}

/** "42s", "3m07s", "1h02m", "2d03h". */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "?";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor(s / 3600) % 24).padStart(2, "0")}h`;
}

const num = (v: number | undefined, f: (v: number) => string) =>
  v === undefined ? undefined : Number.isFinite(v) ? f(v) : String(v);

/** The fields of a progress line, in order (shared by both modes). */
export function progressFields(s: ProgressStats, total: number, etaSeconds: number | undefined): string[] {
  const width = String(total).length;
  return [
    `${String(s.step).padStart(width)}/${total}`,
    num(s.loss, (v) => `loss ${v.toFixed(4)}`),
    num(s.mlmAccuracy, (v) => `mlm acc ${(v * 100).toFixed(1)}%`),
    num(s.accuracy, (v) => `acc ${(v * 100).toFixed(1)}%`),
    num(s.seqPerSec, (v) => `${v >= 100 ? v.toFixed(0) : v.toFixed(1)} seq/s`),
    num(s.lossScale, (v) => `scale ${v}`),
    num(s.learningRate, (v) => `lr ${v.toExponential(2)}`),
    etaSeconds === undefined ? undefined : `eta ${formatDuration(etaSeconds)}`,
  ].filter((x): x is string => x !== undefined);
}

/** Fields dropped, least useful first, when the line is too wide: the step, loss and ETA stay longest. */
const DROP_ORDER = ["lr ", "scale ", "mlm acc ", " seq/s"];

function bar(width: number, fraction: number): string {
  const done = Math.min(width, Math.floor(width * fraction));
  return `[${"=".repeat(done)}${done < width ? ">" : ""}${" ".repeat(Math.max(0, width - done - 1))}]`;
}

/**
 * One progress line within `width` columns (never wrapping: \r could not undo it). The bar shrinks
 * first, then whole fields go (learning rate, loss scale, accuracy, speed), so the ETA stays on an
 * 80-column terminal; cutting the end of the line would lose it first.
 */
export function fitLine(fields: readonly string[], width: number, fraction: number): string {
  let fs = [...fields];
  const join = (barWidth: number) => `${barWidth > 0 ? bar(barWidth, fraction) + " " : ""}${fs.join("  ")}`;
  for (let d = 0;; d++) {
    const text = fs.join("  ");
    const room = width - text.length - 3; // "[", "]" and a space around the bar
    if (room >= 10) return join(Math.min(30, room));
    if (text.length <= width) return text;
    const drop = DROP_ORDER[d];
    if (drop === undefined) return text.slice(0, width);
    fs = fs.filter((f) => !f.includes(drop));
  }
}

export class Progress {
  readonly total: number;
  readonly tty: boolean;
  #write: (text: string) => void;
  #interval: number;
  #columns: () => number;
  #now: () => number;
  #first: { step: number; t: number } | undefined;
  #lastDraw = -Infinity;
  #last: ProgressStats | undefined;
  /** The stats last drawn (plain mode prints each once). */
  #lastDrawn?: ProgressStats;
  #barShown = false;

  constructor(o: ProgressOptions) {
    if (!Number.isSafeInteger(o.total) || o.total < 1) {
      throw new RangeError(`total ${o.total} is not a positive count`);
    }
    this.total = o.total;
    this.tty = o.tty ?? Deno.stderr.isTerminal();
    const enc = new TextEncoder();
    this.#write = o.write ?? ((t) => {
      const b = enc.encode(t);
      for (let off = 0; off < b.length;) off += Deno.stderr.writeSync(b.subarray(off));
    });
    this.#interval = o.intervalMs ?? (this.tty ? 100 : 10_000);
    this.#columns = o.columns ?? (() => {
      try {
        // A pseudo-terminal without a size (script, some CI runners) reports 0 columns.
        return Deno.consoleSize().columns || 100;
      } catch {
        return 100;
      }
    });
    this.#now = o.now ?? (() => performance.now());
  }

  /** Seconds left at the average pace since the first update (the first step, with its warm-up, is excluded). */
  eta(step: number): number | undefined {
    const f = this.#first;
    if (!f || step <= f.step) return undefined;
    const perStep = (this.#now() - f.t) / 1000 / (step - f.step);
    return Math.max(0, this.total - step) * perStep;
  }

  /** Records the latest numbers; redraws (or prints a line) when the interval has passed. */
  update(s: ProgressStats): void {
    const t = this.#now();
    if (!this.#first) this.#first = { step: s.step, t };
    this.#last = s;
    if (t - this.#lastDraw < this.#interval && s.step < this.total) return;
    this.#lastDraw = t;
    this.#draw(s);
  }

  #draw(s: ProgressStats): void {
    this.#lastDrawn = s;
    const fields = progressFields(s, this.total, this.eta(s.step));
    if (!this.tty) {
      this.#write(`step ${fields.join("  ")}\n`);
      return;
    }
    const cols = Math.max(20, this.#columns());
    const line = fitLine(fields, cols - 1, s.step / this.total);
    this.#write(`\r${line}\x1b[K`);
    this.#barShown = true;
  }

  /** Prints a message on its own line without breaking the bar (which is redrawn after it). */
  log(message: string): void {
    if (this.tty && this.#barShown) this.#write("\r\x1b[K");
    this.#write(message.endsWith("\n") ? message : message + "\n");
    if (this.tty && this.#last) this.#draw(this.#last);
  }

  /** Draws the final state (in plain mode only if not printed yet) and ends the line. */
  finish(message?: string): void {
    if (this.#last && (this.tty || this.#last !== this.#lastDrawn)) this.#draw(this.#last);
    if (this.tty && this.#barShown) this.#write("\n");
    this.#barShown = false;
    if (message) this.#write(message.endsWith("\n") ? message : message + "\n");
  }
}
