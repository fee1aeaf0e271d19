/** The browser build in a temporary folder, served on loopback for one test. */
import { buildWeb, type WebBuild } from "../../web/build.ts";
import { serveStatic } from "../../web/serve.ts";

export interface ServedPage {
  readonly url: string;
  readonly build: WebBuild;
  close(): Promise<void>;
}

export async function servePage(): Promise<ServedPage> {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-web-" });
  const build = await buildWeb(dir);
  const server = serveStatic(dir);
  return {
    url: `http://127.0.0.1:${server.addr.port}/`,
    build,
    async close() {
      await server.shutdown();
      await Deno.remove(dir, { recursive: true });
    },
  };
}
