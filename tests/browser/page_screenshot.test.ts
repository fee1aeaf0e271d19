/**
 * A screenshot of the page with an answer shown (the built-in QA checkpoint's example, answered on load):
 * the answer is marked in the context and the time is shown, and the capture is a PNG of the viewport.
 * Written to out/web.png; with BERTFUSE_UPDATE_DOCS=1 also to docs/web.png (committed, shown in docs/web.md).
 */
import assert from "node:assert/strict";
import { noBrowser, withPage } from "./browser_env.ts";
import { servePage } from "./page_server.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

Deno.test({
  name: "screenshot of the page with a marked answer and its time",
  ignore: noBrowser !== undefined,
  sanitizeResources: false,
  fn: async () => {
    const page = await servePage();
    try {
      const png = await withPage(page.url, async ({ page: p }) => {
        await p.send("Emulation.setDeviceMetricsOverride", {
          width: 820,
          height: 1000,
          deviceScaleFactor: 1,
          mobile: false,
        });
        await p.evaluate("bertfuse.ready");
        const shown = await p.evaluate<{ mark: string; timing: string; status: string }>(`({
          mark: document.querySelector("#answer mark")?.textContent ?? "",
          timing: document.getElementById("timing").textContent,
          status: document.getElementById("status").textContent,
        })`);
        assert.notEqual(shown.mark, "", "no answer is marked in the context");
        assert.match(shown.timing, /answered in \d+ ms.*First answer \d+ ms after page load/);
        assert.equal(shown.status, "");
        const { data } = await p.send<{ data: string }>("Page.captureScreenshot", { format: "png" });
        return Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
      });
      assert.deepEqual([...png.slice(0, 8)], PNG_SIGNATURE);
      // IHDR: width and height, big-endian, at bytes 16..24.
      const view = new DataView(png.buffer);
      assert.deepEqual([view.getUint32(16), view.getUint32(20)], [820, 1000]);
      await Deno.mkdir(`${ROOT}out`, { recursive: true });
      await Deno.writeFile(`${ROOT}out/web.png`, png);
      if (Deno.env.get("BERTFUSE_UPDATE_DOCS") === "1") await Deno.writeFile(`${ROOT}docs/web.png`, png);
    } finally {
      await page.close();
    }
  },
});
