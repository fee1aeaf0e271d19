/**
 * A Web Worker that watches for stop signals while the main thread is busy. The reference backend runs a
 * whole training step synchronously, for seconds; signals that arrive meanwhile reach the main thread
 * only after the step, and two Ctrl-C within one step arrive as one. This worker's event loop is free:
 * it sees every signal when it comes, and on a second one (a repeat of the first within `sameMs` is that
 * one delivered twice: signals.ts) says so and ends the process at once with the status a shell expects
 * (130 for SIGINT) through libc's `_exit`: Deno.exit in a worker ends only the worker.
 */
/// <reference lib="deno.worker" />

const enc = new TextEncoder();

/** The numbers shells add to 128 in a killed process's status (POSIX and Linux agree on these). */
const SIGNAL_NUMBER: Partial<Record<string, number>> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGTERM: 15 };

/**
 * Ends the whole process with `code` (130 after Ctrl-C, as a shell expects) from this worker while the main
 * thread is blocked: libc's `_exit` through FFI (the training tasks allow it). Without FFI, SIGKILL (137);
 * without --allow-run either, the main thread quits after its step.
 */
function exitProcess(code: number): void {
  try {
    const libc = Deno.build.os === "darwin" ? "libSystem.dylib" : "libc.so.6";
    Deno.dlopen(libc, { _exit: { parameters: ["i32"], result: "void" } }).symbols._exit(code);
  } catch { /* no FFI here */ }
  try {
    Deno.kill(Deno.pid, "SIGKILL");
  } catch { /* no --allow-run */ }
}
let first: { sig: Deno.Signal; at: number } | undefined;
self.onmessage = (e: MessageEvent<{ signals: Deno.Signal[]; sameMs: number }>) => {
  for (const sig of e.data.signals) {
    try {
      Deno.addSignalListener(sig, () => {
        const at = performance.now();
        if (!first) return void (first = { sig, at });
        if (sig === first.sig && at - first.at < e.data.sameMs) return;
        // Give a free main thread the chance to quit the ordinary way (its message, exit 128 + n).
        setTimeout(() => {
          Deno.stderr.writeSync(enc.encode(`\n${sig} again: quitting now without saving\n`));
          exitProcess(128 + (SIGNAL_NUMBER[sig] ?? 9));
        }, 300);
      });
    } catch { /* a signal this platform cannot listen for */ }
  }
  self.postMessage("ready");
};
