/**
 * SIGTERM (and SIGINT, for a person at a terminal) drain the server: no new connections, every request
 * already in flight answered, then the returned promise resolves and the command exits 0. A second
 * signal while draining is ignored: the drain is already on its way, and killing it would drop answers.
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
      server.drain().then(() => {
        for (const s of signals) Deno.removeSignalListener(s, onSignal);
        resolve();
      });
    };
    for (const s of signals) Deno.addSignalListener(s, onSignal);
  });
}
