/**
 * What the browser tests share: whether Chromium is here (the tier is ignored with the reason when it is
 * not), and a headless Chromium with a page open on a loopback server for the duration of one test.
 */
import { type Browser, findChromium, launchChromium, navigate } from "../util/cdp.ts";

const found = findChromium();
/** Why the browser tests cannot run here, or undefined when they can. */
export const noBrowser: string | undefined = "missing" in found ? found.missing : undefined;
if (noBrowser) console.log(`browser tests skipped: ${noBrowser}`);

/** Starts Chromium, opens `url`, runs `f`, and always closes the browser (its console joins a failure). */
export async function withPage<T>(url: string, f: (b: Browser) => Promise<T>): Promise<T> {
  const browser = await launchChromium();
  try {
    await navigate(browser.page, url);
    return await f(browser);
  } catch (e) {
    const log = browser.console.length ? `\npage console:\n${browser.console.slice(-20).join("\n")}` : "";
    throw new Error(`${(e as Error).message}${log}`);
  } finally {
    await browser.close();
  }
}

/** A loopback server with one empty page: a secure context (WebGPU needs one) with nothing else in it. */
export function blankPageServer(): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response("<!doctype html><title>blank</title>", { headers: { "content-type": "text/html" } }),
  );
}
