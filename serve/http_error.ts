/**
 * What a client did wrong (or what the server cannot take now), as an HTTP status and one line. The router
 * turns it into `{"error": "..."}` with that status, the shape KServe v2 gives its error responses, so a
 * bad request never becomes a stack trace or a 500.
 */
export class HttpError extends Error {
  constructor(readonly status: number, message: string, readonly headers: Record<string, string> = {}) {
    super(message);
    this.name = "HttpError";
  }
}

export const badRequest = (message: string) => new HttpError(400, message);

/** A JSON response; every body the server writes goes through here. */
export function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

export function errorResponse(e: HttpError): Response {
  return json({ error: e.message }, e.status, e.headers);
}
