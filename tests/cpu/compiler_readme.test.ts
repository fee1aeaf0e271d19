/** compiler/README.md lists the compile's stages in the order they run, as the pipeline runs them. */
import assert from "node:assert/strict";
import { COMPILE_STAGES } from "../../compiler/driver/compile.ts";

Deno.test("compiler/README.md: its stage list is the pipeline's, in order, with the skippable ones marked", () => {
  const text = Deno.readTextFileSync(new URL("../../compiler/README.md", import.meta.url));
  const listed = [...text.matchAll(/^\d+\. `([a-z-]+)`( \(skippable)?/gm)].map((m) => ({
    name: m[1],
    skippable: m[2] !== undefined,
  }));
  assert.deepEqual(listed, COMPILE_STAGES.map((s) => ({ name: s.name, skippable: s.skippable })));
});

const CORE = ["ir", "plan", "numeric", "compiler", "runtime", "engine"];
const filesUnder = (dir: string): string[] =>
  [...Deno.readDirSync(dir)].flatMap((e) =>
    e.isDirectory ? filesUnder(`${dir}/${e.name}`) : [`${dir}/${e.name}`]
  );
const root = new URL("../../", import.meta.url).pathname;

Deno.test("compiler/README.md: folders import only from themselves or earlier ones; nothing loose; core base names unique", () => {
  const text = Deno.readTextFileSync(`${root}compiler/README.md`);
  const where = text.slice(text.indexOf("## Where things are"));
  const order = [...where.matchAll(/^\d+\. `([a-z_]+)\/`/gm)].map((m) => m[1]);
  const folders = [...Deno.readDirSync(`${root}compiler`)].filter((e) => e.isDirectory).map((e) => e.name);
  assert.deepEqual([...order].sort(), folders.sort(), "every compiler folder is listed once");
  const loose = [...Deno.readDirSync(`${root}compiler`)].filter((e) => e.isFile && e.name.endsWith(".ts"));
  assert.deepEqual(loose.map((e) => e.name), []);
  // The two the README names: a target binds its emitter; the flash recogniser goes with attention as an op.
  const allowed = new Set(["target.ts -> codegen", "target.ts -> kernel_ir"]);
  const late: string[] = [];
  for (const file of filesUnder(`${root}compiler`).filter((f) => f.endsWith(".ts"))) {
    const from = file.slice(`${root}compiler/`.length);
    for (const m of Deno.readTextFileSync(file).matchAll(/from "(\.[^"]+)"/g)) {
      const to = new URL(m[1], `file://${file}`).pathname;
      if (!to.startsWith(`${root}compiler/`)) continue;
      const folder = to.slice(`${root}compiler/`.length).split("/")[0];
      const edge = `${from.split("/").pop()} -> ${folder}`;
      if (order.indexOf(folder) > order.indexOf(from.split("/")[0]) && !allowed.has(edge)) late.push(edge);
    }
  }
  assert.deepEqual(late, [], "imports from a folder that runs later");
  const core = CORE.flatMap((d) => filesUnder(`${root}${d}`)).filter((f) => /\.(ts|c|h|cu|wgsl)$/.test(f));
  const bases = core.map((f) => f.slice(f.lastIndexOf("/") + 1));
  assert.deepEqual(
    core.filter((_, i) => bases.indexOf(bases[i]) !== i),
    [],
    "core files sharing a base name",
  );
});
