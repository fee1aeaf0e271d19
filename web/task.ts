/** `deno task web [--port N] [--out DIR]`: builds the browser page and serves it on 127.0.0.1. */
import { parseFlags, runMain, UsageError } from "../cli/common.ts";
import { buildWeb, DEFAULT_OUT } from "./build.ts";
import { serveStatic } from "./serve.ts";

const HELP = `
deno task web [--port N] [--out DIR]

Builds the browser page (bertfuse.js, WebGPU in the page: QA, classification, fill-mask) into DIR (default
out/web: absent, empty or an earlier build, whose other files stay) and serves it on http://127.0.0.1:N
(default 8000; 0 picks a free port). Open it in a browser with WebGPU and pick a checkpoint folder.
Ctrl-C stops the server.
`;

await runMain(async () => {
  const { values } = parseFlags(Deno.args, { port: { type: "string" }, out: { type: "string" } }, HELP);
  const port = values.port === undefined ? 8000 : Number(values.port);
  if (!/^\d+$/.test(values.port ?? "0") || !Number.isInteger(port) || port > 65535) {
    throw new UsageError(`--port must be an integer from 0 to 65535, got '${values.port}'`);
  }
  const b = await buildWeb(values.out ?? DEFAULT_OUT);
  console.log(
    `built ${b.outDir}/bertfuse.js: ${(b.bundleBytes / 1024).toFixed(1)} KiB, ${
      (b.gzipBytes / 1024).toFixed(1)
    } KiB gzipped`,
  );
  serveStatic(b.outDir, {
    port,
    onListen: (url) => console.log(`serving the page at ${url} (Ctrl-C stops; needs a browser with WebGPU)`),
  });
});
