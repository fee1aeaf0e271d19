/**
 * Reading a request body within a byte limit. The limit is checked on the declared Content-Length first
 * and again while streaming, so a client that lies about (or omits) the length still cannot make the
 * server hold more than the limit in memory.
 */
import { HttpError } from "./http_error.ts";

export async function readBytes(req: Request, maxBytes: number, timeoutMs = 10_000, stop?: AbortSignal) {
  const tooLarge = () => new HttpError(413, `request body exceeds the limit of ${maxBytes} bytes`);
  const declared = req.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) throw tooLarge();
  if (!req.body) throw new HttpError(400, "request body is empty (expected a JSON object)");
  // The whole body within timeoutMs, and none awaited once the server drains (503): a client that sends it
  // slowly (or never) must not hold a request, its buffers or the shutdown. The read is left pending, not
  // cancelled: a cancelled body keeps Deno's connection waiting for its remaining bytes, and the drain with
  // it, for ever; a pending one gets `connection: close` and ends with the client or the drain.
  let timer: ReturnType<typeof setTimeout> | undefined, onStop = () => {};
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new HttpError(408, `request body not received within ${timeoutMs} ms`)),
      timeoutMs,
    );
    onStop = () => reject(new HttpError(503, "server is shutting down"));
    stop?.addEventListener("abort", onStop);
    if (stop?.aborted) onStop();
  });
  const race = <T>(p: Promise<T>) => (p.catch(() => {}), Promise.race([p, late]));
  try {
    // A declared length is all Deno reads, so read it at once: a pending stream read holds a 64 KiB
    // buffer (1,024 slow clients: 64 MB) where this holds what arrived.
    if (declared !== null) return await race(req.bytes());
    const chunks: Uint8Array[] = [];
    let total = 0;
    const reader = req.body.getReader();
    for (;;) {
      const { done, value } = await race(reader.read());
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) throw tooLarge();
      chunks.push(value);
    }
    return new Uint8Array(await new Blob(chunks as BlobPart[]).arrayBuffer());
  } finally {
    clearTimeout(timer);
    stop?.removeEventListener("abort", onStop);
  }
}

/** `bytes` as JSON (UTF-8), or a 400 saying what is wrong with `what` (the body, or a binary request's header). */
export function parseJson(bytes: Uint8Array, what = "request body"): unknown {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new HttpError(400, `${what} is not valid UTF-8`);
  }
  if (text.trim() === "") throw new HttpError(400, `${what} is empty (expected a JSON object)`);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new HttpError(400, `${what} is not valid JSON (${(e as Error).message})`);
  }
}

/** The body as a JSON object (not an array, string or null), or a 400 naming what came instead. */
export function asObject(v: unknown, what = "request body"): Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    const got = v === null ? "null" : Array.isArray(v) ? "an array" : `a ${typeof v}`;
    throw new HttpError(400, `${what} must be a JSON object, got ${got}`);
  }
  return v as Record<string, unknown>;
}

/** Rejects fields a handler does not know, so a misspelt option is not silently ignored. */
export function onlyFields(o: Record<string, unknown>, allowed: readonly string[], what: string): void {
  const extra = Object.keys(o).filter((k) => !allowed.includes(k));
  if (extra.length) {
    throw new HttpError(400, `${what}: unknown field '${extra[0]}' (expected ${allowed.join(", ")})`);
  }
}
