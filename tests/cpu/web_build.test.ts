/** `deno task web`'s build writes its own files into the folder and leaves the user's there (issue 28). */
import assert from "node:assert/strict";
import { buildWeb } from "../../web/build.ts";
import { withTemp } from "../util/cli.ts";

Deno.test("web build: rebuilding into a folder keeps a file of the user's, and writes the page", () =>
  withTemp(async (dir) => {
    await Deno.writeTextFile(`${dir}/notes.txt`, "mine");
    const first = await buildWeb(dir), again = await buildWeb(dir);
    assert.equal(await Deno.readTextFile(`${dir}/notes.txt`), "mine");
    assert.ok(first.bundleBytes > 0 && again.bundleBytes === first.bundleBytes);
    const index = JSON.parse(await Deno.readTextFile(`${dir}/tiny/index.json`));
    assert.ok(Object.keys(index).length > 0);
  }));
