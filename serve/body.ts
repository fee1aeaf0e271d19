/**
 * Reading a request body within a byte limit. The limit is checked on the declared Content-Length first
 * and again while streaming, so a client that lies about (or omits) the length still cannot make the
 * server hold more than the limit in memory.
 */
import { HttpError } from "./http_error.ts";

export async function readBytes(req: Request, maxBytes: number, timeoutMs = 10_000): Promise<Uint8Array> {
  const tooLarge = () => new HttpError(413, `request body exceeds the limit of ${maxBytes} bytes`);
  const declared = req.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) throw tooLarge();
  if (!req.body) throw new HttpError(400, "request body is empty (expected a JSON object)");
  const chunks: Uint8Array[] = [];
  let total = 0;
  const reader = req.body.getReader();
  // The whole body within timeoutMs: a client that sends it slowly (or never) must not hold a request,
  // its buffers and, at shutdown, the drain, for ever.
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new HttpError(408, `request body not received within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    for (;;) {
      const { done, value } = await Promise.race([reader.read(), late]).catch(async (e) => {
        await reader.cancel().catch(() => {});
        throw e;
      });
      if (done) break;
      total += value.byteLength;
      if (total > maxBytes) {
        await reader.cancel();
        throw tooLarge();
      }
      chunks.push(value);
    }
  } finally {
    clearTimeout(timer);
  }
  return new Uint8Array(await new Blob(chunks as BlobPart[]).arrayBuffer());
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
