/**
 * Graceful stop: the first SIGINT or SIGTERM sets a flag that the training loop polls between steps
 * (finish the step, save a checkpoint, exit 0). A second signal means "now": a message and an immediate
 * exit with the conventional 128 + signal number, without saving.
 *
 *   using stop = new StopSignal().install();   // or stop.dispose() in a finally
 *   for (...) { step(); if (stop.requested) { save(); break; } }
 *
 * One Ctrl-C often arrives twice: the terminal sends SIGINT to the whole foreground process group, and
 * `deno task` (in that group too) forwards what it gets to its child; a supervisor that signals the group
 * does the same. Neither copy can be told from the other (Deno shows no sender), so the rule is by time:
 * a repeat of the first signal within SAME_SIGNAL_MS of it is the same request. A person pressing again on
 * purpose is slower than that; another signal (SIGTERM after SIGINT) always counts as a second one. The
 * main thread sees signals only between steps, where two presses in one step look as one: the worker
 * (signal_watch.ts) sees them as they come, by the same rule.
 */

/** Repeats of the first stop signal within this many ms count as that one (see above). */
export const SAME_SIGNAL_MS = 500;

/** A yield to the event loop: a long synchronous step (reference, CPU backend) otherwise starves signals. */
export const breathe = (): Promise<void> => new Promise<void>((r) => setTimeout(r, 0));

export interface StopSignalOptions {
  /** Default SIGINT and SIGTERM (where the platform cannot listen for one, it is left out). */
  signals?: Deno.Signal[];
  /** Where messages go (default: stderr). */
  write?: (text: string) => void;
  /** How to leave on the second signal (default Deno.exit; tests replace it). */
  exit?: (code: number) => void;
  /**
   * Also watch from a worker (signal_watch.ts), so a second signal quits at once even while the main
   * thread is blocked in a long synchronous step (default false; `deno task train` turns it on).
   */
  watchWhileBlocked?: boolean;
}

const SIGNAL_NUMBERS: Partial<Record<Deno.Signal, number>> = {
  SIGINT: 2,
  SIGTERM: 15,
  SIGHUP: 1,
  SIGQUIT: 3,
};

export class StopSignal {
  #requested: Deno.Signal | undefined;
  #at = 0;
  #listeners: [Deno.Signal, () => void][] = [];
  #write: (text: string) => void;
  #exit: (code: number) => void;
  #watcher: Worker | undefined;
  #watch: boolean;
  #ready: Promise<void> = Promise.resolve();
  readonly signals: Deno.Signal[];

  constructor(o: StopSignalOptions = {}) {
    this.signals = o.signals ?? ["SIGINT", "SIGTERM"];
    const enc = new TextEncoder();
    this.#write = o.write ?? ((t) => void Deno.stderr.writeSync(enc.encode(t)));
    this.#exit = o.exit ?? ((code) => Deno.exit(code));
    this.#watch = o.watchWhileBlocked ?? false;
  }

  /** True once a stop was asked for. */
  get requested(): boolean {
    return this.#requested !== undefined;
  }

  /** The signal that asked for the stop. */
  get signal(): Deno.Signal | undefined {
    return this.#requested;
  }

  /** Starts listening; returns this. */
  install(): this {
    for (const sig of this.signals) {
      const fn = () => this.handle(sig);
      try {
        Deno.addSignalListener(sig, fn);
        this.#listeners.push([sig, fn]);
      } catch {
        // Windows listens only for SIGINT and SIGBREAK; the others cannot be delivered there anyway.
      }
    }
    if (this.#watch) {
      try {
        const w = new Worker(new URL("./signal_watch.ts", import.meta.url).href, { type: "module" });
        this.#ready = new Promise((resolve) => {
          w.onmessage = () => resolve();
          w.onerror = (e) => (e.preventDefault(), resolve());
        });
        w.postMessage({ signals: this.signals, sameMs: SAME_SIGNAL_MS });
        this.#watcher = w;
      } catch { /* no worker: signals are still handled between steps */ }
    }
    return this;
  }

  /** Resolves once the watcher (if any) listens; a run starting its steps waits for it. */
  ready(): Promise<void> {
    return this.#ready;
  }

  /** What a delivered signal does (public so it can be tested without sending signals). */
  handle(sig: Deno.Signal): void {
    const now = performance.now();
    if (sig === this.#requested && now - this.#at < SAME_SIGNAL_MS) return; // one press, delivered twice
    if (this.#requested === undefined) {
      [this.#requested, this.#at] = [sig, now];
      this.#write(
        `\n${sig}: stopping after this step and saving a checkpoint (send it again to quit at once without saving)\n`,
      );
      return;
    }
    this.#write(`\n${sig} again: quitting now without saving\n`);
    this.#exit(128 + (SIGNAL_NUMBERS[sig] ?? 0));
  }

  /** Stops listening (the default signal behaviour returns). */
  dispose(): void {
    for (const [sig, fn] of this.#listeners) Deno.removeSignalListener(sig, fn);
    this.#listeners = [];
    this.#watcher?.terminate();
    this.#watcher = undefined;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
