/** A spawned `serve` read up to its "ready:" line, for the serving benchmarks. */
import { UsageError } from "../cli/common.ts";

/**
 * Reads `child`'s stdout until the server prints "ready:", then keeps the pipe flowing (`drained` ends with
 * it) and collects stderr. A server that exits first is a UsageError naming `what` with its stderr.
 */
export async function readyServer(child: Deno.ChildProcess, what: string) {
  const stderr = new Response(child.stderr).text();
  const reader = child.stdout.getReader();
  let out = "";
  while (!/^ready: /m.test(out)) {
    const { done, value } = await reader.read();
    if (done) throw new UsageError(`${what} exited before ready: ${(await stderr).trim()}`);
    out += new TextDecoder().decode(value);
  }
  const drained = (async () => {
    while (!(await reader.read()).done) { /* keep the pipe flowing */ }
  })();
  return { out, stderr, drained };
}
