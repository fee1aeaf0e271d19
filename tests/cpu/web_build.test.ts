/**
 * `deno task web`'s build writes its own files into the folder and leaves the user's there (issue 28), and
 * docs/web.md states the bundle's size as built (issue 27: it said 205,597 bytes when it was 295 KiB).
 */
import assert from "node:assert/strict";
import { buildWeb } from "../../web/build.ts";
import { ROOT, withTemp } from "../util/cli.ts";

Deno.test("web build: rebuilding into a folder keeps a file of the user's, and writes the page", () =>
  withTemp(async (dir) => {
    await Deno.writeTextFile(`${dir}/notes.txt`, "mine");
    const first = await buildWeb(dir), again = await buildWeb(dir);
    assert.equal(await Deno.readTextFile(`${dir}/notes.txt`), "mine");
    assert.ok(first.bundleBytes > 0 && again.bundleBytes === first.bundleBytes);
    const index = JSON.parse(await Deno.readTextFile(`${dir}/tiny/index.json`));
    assert.ok(Object.keys(index).length > 0);
  }));

/** The size line of docs/web.md: bytes and gzipped bytes, with thousands separators. */
const SIZE_LINE = /`bertfuse\.js` is \*\*([\d,]+) bytes, ([\d,]+) gzipped\*\*/;

Deno.test("docs/web.md's bundle size is the built bundle's, within 10% (BERTFUSE_UPDATE_DOCS=1 rewrites it)", () =>
  withTemp(async (dir) => {
    const b = await buildWeb(dir), doc = `${ROOT}docs/web.md`, text = await Deno.readTextFile(doc);
    const m = SIZE_LINE.exec(text);
    assert.ok(m, "docs/web.md has no size line");
    const fmt = (n: number) => n.toLocaleString("en-US");
    if (Deno.env.get("BERTFUSE_UPDATE_DOCS") === "1") {
      const line = `\`bertfuse.js\` is **${fmt(b.bundleBytes)} bytes, ${fmt(b.gzipBytes)} gzipped**`;
      await Deno.writeTextFile(doc, text.replace(m[0], line));
      return;
    }
    for (const [documented, built] of [[m[1], b.bundleBytes], [m[2], b.gzipBytes]] as const) {
      const d = Number(documented.replaceAll(",", ""));
      assert.ok(
        Math.abs(built - d) <= 0.1 * d,
        `documented ${documented} bytes, built ${fmt(built)}: ${m[0]}`,
      );
    }
  }));
