/** compiler/README.md lists the compile's stages in the order they run, as the pipeline runs them. */
import assert from "node:assert/strict";
import { COMPILE_STAGES } from "../../compiler/compile.ts";

Deno.test("compiler/README.md: its stage list is the pipeline's, in order, with the skippable ones marked", () => {
  const text = Deno.readTextFileSync(new URL("../../compiler/README.md", import.meta.url));
  const listed = [...text.matchAll(/^\d+\. `([a-z-]+)`( \(skippable)?/gm)].map((m) => ({
    name: m[1],
    skippable: m[2] !== undefined,
  }));
  assert.deepEqual(listed, COMPILE_STAGES.map((s) => ({ name: s.name, skippable: s.skippable })));
});
