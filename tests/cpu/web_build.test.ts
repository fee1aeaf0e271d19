/**
 * `deno task web` follows the output rule (issue 28): a folder of the user's files is refused, its own
 * build is rebuilt and the user's files in it stay; and docs/web.md states the bundle's size as built
 * (issue 27: it said 205,597 bytes when it was 295 KiB).
 */
import assert from "node:assert/strict";
import { buildWeb } from "../../web/build.ts";
import { ROOT, withTemp } from "../util/cli.ts";

/** `deno task web --out DIR --port 0` with its task's permissions, stopped once it serves. */
async function web(out: string) {
  const perms = ["--allow-read", "--allow-write", "--allow-env", "--allow-run", "--allow-net=127.0.0.1"];
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", ...perms, `${ROOT}web/task.ts`, "--out", out, "--port", "0"],
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  let stdout = "";
  for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
    if ((stdout += chunk).includes("serving the page at")) child.kill("SIGTERM");
  }
  return {
    code: (await child.status).code,
    serving: stdout.includes("serving the page"),
    stderr: await stderr,
  };
}

Deno.test("deno task web: a folder of user files is refused as it was; a rebuild keeps the user's file", () =>
  withTemp(async (dir) => {
    await Deno.writeTextFile(`${dir}/notes.txt`, "mine");
    const r = await web(dir);
    assert.equal(r.code, 1);
    assert.match(
      r.stderr,
      /^error: --out .* holds files that are not a page built by deno task web[^\n]*\n$/,
    );
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["notes.txt"]);
    assert.ok((await web(`${dir}/web`)).serving);
    await Deno.writeTextFile(`${dir}/web/notes.txt`, "mine");
    const again = await web(`${dir}/web`);
    assert.ok(again.serving, again.stderr);
    assert.equal(await Deno.readTextFile(`${dir}/web/notes.txt`), "mine");
    assert.ok(Array.isArray(JSON.parse(await Deno.readTextFile(`${dir}/web/tiny/index.json`)).qa));
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
