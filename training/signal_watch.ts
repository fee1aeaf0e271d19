/**
 * A Web Worker that watches for stop signals while the main thread is busy. The reference backend runs a
 * whole training step synchronously, for seconds; signals that arrive meanwhile reach the main thread
 * only after the step, and two Ctrl-C within one step arrive as one. This worker's event loop is free:
 * it counts every signal, and on the second one says so and ends the process at once (SIGKILL, the only
 * way out of a blocked main thread; Deno.exit in a worker ends only the worker).
 */
/// <reference lib="deno.worker" />

const enc = new TextEncoder();
let count = 0;
self.onmessage = (e: MessageEvent<{ signals: Deno.Signal[] }>) => {
  for (const sig of e.data.signals) {
    try {
      Deno.addSignalListener(sig, () => {
        count++;
        if (count < 2) return;
        // Give a free main thread the chance to quit the ordinary way (its message, exit 128 + n).
        setTimeout(() => {
          Deno.stderr.writeSync(enc.encode(`\n${sig} again: quitting now without saving\n`));
          try {
            Deno.kill(Deno.pid, "SIGKILL");
          } catch { /* no --allow-run: the main thread quits after its step */ }
        }, 300);
      });
    } catch { /* a signal this platform cannot listen for */ }
  }
  self.postMessage("ready");
};
