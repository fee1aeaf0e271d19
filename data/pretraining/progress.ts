/**
 * prepare-data's progress bar on stderr: redrawn in place on a terminal; elsewhere (a log file, CI) one
 * line per finished phase, so logs stay short.
 */
import type { Phase } from "./prepare.ts";

const LABEL: Record<Phase, string> = {
  read: "reading input",
  tokenize: "tokenizing",
  shards: "making shards",
};
const WIDTH = 30;

interface Out {
  writeSync(b: Uint8Array): number;
  isTerminal(): boolean;
}

export function progressBar(out: Out = Deno.stderr): (phase: Phase, done: number, total: number) => void {
  const enc = new TextEncoder();
  const tty = out.isTerminal();
  const t0 = performance.now();
  return (phase, done, total) => {
    if (!tty && done < total) return;
    const secs = ((performance.now() - t0) / 1000).toFixed(1);
    const fill = total > 0 ? Math.round((WIDTH * done) / total) : WIDTH;
    const bar = `${"#".repeat(fill)}${".".repeat(WIDTH - fill)}`;
    const line = `${LABEL[phase].padEnd(14)} [${bar}] ${done}/${total}  ${secs} s`;
    out.writeSync(enc.encode(tty ? `\r\x1b[K${line}${done === total ? "\n" : ""}` : `${line}\n`));
  };
}
