/**
 * Routes a request to its handler and turns every outcome into a response: handler results as JSON,
 * HttpError as `{"error": "..."}` with its status, and anything unexpected as a 500 with one line (and
 * the stack on the server's stderr), so no request can crash the server. Each answer is counted in the
 * metrics under its endpoint and status.
 */
import { errorResponse, HttpError, inFlightError, json, MAX_IN_FLIGHT } from "./http_error.ts";
import type { ServeMetrics } from "./metrics.ts";

/** `params` are the route's capture groups, undefined where an optional group did not match. */
export type Handler = (
  req: Request,
  params: (string | undefined)[],
) => Promise<Response | unknown> | Response | unknown;

export interface Route {
  method: "GET" | "POST";
  /** Matched against the whole path; capture groups become `params`. */
  path: RegExp;
  /** The endpoint label in the metrics. */
  endpoint: string;
  /** Inference routes are timed in bertfuse_request_duration_seconds. */
  timed?: boolean;
  handler: Handler;
}

export function createRouter(
  routes: Route[],
  metrics: ServeMetrics,
  log: (line: string) => void,
  maxInFlight = MAX_IN_FLIGHT,
) {
  const answer = async (req: Request): Promise<Response> => {
    const path = new URL(req.url).pathname;
    // Requests with a body count against the cap; health checks and metrics still answer when it is full.
    if (req.method !== "GET" && metrics.inFlight.value >= maxInFlight) {
      metrics.requests.inc({ endpoint: "overloaded", code: "503" });
      return errorResponse(inFlightError(maxInFlight));
    }
    const matching = routes.filter((r) => r.path.test(path));
    const route = matching.find((r) => r.method === req.method);
    const endpoint = route?.endpoint ?? "unknown";
    const t0 = performance.now();
    metrics.inFlight.value++;
    let res: Response;
    try {
      if (!route) {
        throw matching.length
          ? new HttpError(405, `${req.method} is not allowed on ${path}`, {
            allow: matching.map((r) => r.method).join(", "),
          })
          : new HttpError(404, `no such endpoint: ${path}`);
      }
      const out = await route.handler(
        req,
        route.path.exec(path)!.slice(1).map((p) => p === undefined ? p : decodeURIComponent(p)),
      );
      res = out instanceof Response ? out : json(out);
    } catch (e) {
      if (e instanceof HttpError) res = errorResponse(e);
      else {
        log(`error: ${req.method} ${path}: ${e instanceof Error ? e.stack ?? e.message : e}`);
        const msg = e instanceof Error ? e.message.split("\n")[0] : String(e);
        res = errorResponse(new HttpError(500, `internal error: ${msg}`));
      }
    } finally {
      metrics.inFlight.value--;
    }
    metrics.answered(endpoint, String(res.status), res.status >= 400, t0, route?.timed);
    return res;
  };
  return async (req: Request) => {
    const res = await answer(req);
    // A body left unread (404, 405, a full cap) is locked: untouched, Deno's shutdown waits for it for ever.
    if (req.body?.locked === false) req.body.getReader();
    return res;
  };
}
