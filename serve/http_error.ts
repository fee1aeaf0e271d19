/**
 * What a client did wrong (or what the server cannot take now), as an HTTP status and one line. The router
 * turns it into `{"error": "..."}` with that status, the shape KServe v2 gives its error responses, so a
 * bad request never becomes a stack trace or a 500.
 */
export class HttpError extends Error {
  /** `exhausted`: refused for load (queue or in-flight cap full), which gRPC tells apart from a drain. */
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Record<string, string> = {},
    readonly exhausted = false,
  ) {
    super(message);
    this.name = "HttpError";
  }
}

export const badRequest = (message: string) => new HttpError(400, message);

/** The default cap on requests handled at once (REST with a body, and gRPC inference). */
export const MAX_IN_FLIGHT = 1024;

/** The cap on requests handled at once (REST with a body, and gRPC inference) is full. */
export const inFlightError = (max: number) =>
  new HttpError(503, `${max} requests in flight; retry`, { "retry-after": "1" }, true);

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
