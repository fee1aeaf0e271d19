/**
 * SIGTERM (and SIGINT, for a person at a terminal) drain the server: no new connections, every request
 * already in flight answered, then the returned promise resolves and the command exits 0. A second
 * signal is ignored, during the drain and after it until the exit: one Ctrl-C arrives twice (the terminal
 * and `deno task` each send it), and the second copy, once its listener was gone, killed a server still
 * warming up with exit 130.
 */
import type { Server } from "./server.ts";

export function drainOnSignals(server: Server, log: (line: string) => void): Promise<void> {
  return new Promise((resolve) => {
    let draining = false;
    const signals: Deno.Signal[] = Deno.build.os === "windows" ? ["SIGINT"] : ["SIGTERM", "SIGINT"];
    const onSignal = () => {
      if (draining) return;
      draining = true;
      log("draining: finishing requests in flight");
      server.drain().then(resolve);
    };
    for (const s of signals) Deno.addSignalListener(s, onSignal);
  });
}
