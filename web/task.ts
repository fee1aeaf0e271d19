/** `deno task web [--port N]`: builds the browser bundle into out/web and serves it on 127.0.0.1. */
import { parseArgs } from "node:util";
import { buildWeb } from "./build.ts";
import { serveStatic } from "./serve.ts";

const { values } = parseArgs({ args: Deno.args, options: { port: { type: "string" } } });
const port = values.port === undefined ? 8000 : Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`--port must be an integer from 0 to 65535, got '${values.port}'`);
  Deno.exit(1);
}
const b = await buildWeb();
console.log(
  `built ${b.outDir}/bertfuse.js: ${(b.bundleBytes / 1024).toFixed(1)} KiB, ${
    (b.gzipBytes / 1024).toFixed(1)
  } KiB gzipped`,
);
serveStatic(b.outDir, {
  port,
  onListen: (url) => console.log(`serving the page at ${url} (Ctrl-C stops; needs a browser with WebGPU)`),
});
