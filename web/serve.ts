/**
 * A small static file server for the browser build, on loopback: GET of files under one folder, with
 * the content types the page needs; anything outside the folder is 404.
 */
const TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  json: "application/json",
  txt: "text/plain; charset=utf-8",
  png: "image/png",
};

export function serveStatic(
  dir: string,
  opts: { port?: number; hostname?: string; onListen?: (url: string) => void } = {},
): Deno.HttpServer<Deno.NetAddr> {
  const hostname = opts.hostname ?? "127.0.0.1";
  return Deno.serve({
    hostname,
    port: opts.port ?? 0,
    onListen: (addr) => opts.onListen?.(`http://${addr.hostname}:${addr.port}/`),
  }, async (req) => {
    if (req.method !== "GET" && req.method !== "HEAD") {
      return new Response("method not allowed", { status: 405 });
    }
    let path = decodeURIComponent(new URL(req.url).pathname);
    if (path.endsWith("/")) path += "index.html";
    // No "..", no hidden files: only what the build wrote.
    if (path.split("/").some((p) => p === ".." || p.startsWith("."))) {
      return new Response("not found", { status: 404 });
    }
    try {
      const body = await Deno.readFile(`${dir}${path}`);
      const ext = path.slice(path.lastIndexOf(".") + 1);
      return new Response(req.method === "HEAD" ? null : body, {
        headers: { "content-type": TYPES[ext] ?? "application/octet-stream", "cache-control": "no-store" },
      });
    } catch {
      return new Response("not found", { status: 404 });
    }
  });
}
