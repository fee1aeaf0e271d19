/**
 * tools/line_count.ts, the line caps CI checks: run as CI runs it on a temporary tree, it passes under the
 * caps, fails past one naming the folder, fails on a folder without a cap, and `--write-caps` applies the
 * headroom rule.
 */
import assert from "node:assert/strict";
import { capFor, linesOf } from "../../tools/line_count.ts";
import { withTemp } from "../util/cli.ts";

const TOOL = new URL("../../tools/line_count.ts", import.meta.url).pathname;

async function lineCount(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-read", "--allow-write", TOOL, ...args],
    env: { NO_COLOR: "1" },
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

function lines(n: number): string {
  return Array.from({ length: n }, (_, i) => `export const x${i} = ${i};\n`).join("");
}

/** ir/ 30 lines, compiler/ 120 (in a subfolder too), runtime/ 10, plus files that do not count. */
async function makeTree(root: string) {
  for (const dir of ["ir", "compiler/lower", "runtime", "node_modules/pkg", ".hidden", "docs"]) {
    await Deno.mkdir(`${root}/${dir}`, { recursive: true });
  }
  await Deno.writeTextFile(`${root}/ir/ops.ts`, lines(30));
  await Deno.writeTextFile(`${root}/compiler/a.ts`, lines(100));
  await Deno.writeTextFile(`${root}/compiler/lower/b.ts`, lines(20));
  await Deno.writeTextFile(`${root}/runtime/c.ts`, lines(10));
  await Deno.writeTextFile(`${root}/runtime/notes.md`, lines(500));
  await Deno.writeTextFile(`${root}/node_modules/pkg/index.ts`, lines(500));
  await Deno.writeTextFile(`${root}/.hidden/x.ts`, lines(500));
  await Deno.writeTextFile(`${root}/docs/README.md`, lines(500));
  await Deno.writeTextFile(`${root}/top.ts`, lines(500));
}

Deno.test("linesOf counts newlines and a last line without one", () => {
  assert.equal(linesOf(""), 0);
  assert.equal(linesOf("a"), 1);
  assert.equal(linesOf("a\n"), 1);
  assert.equal(linesOf("a\n\nb"), 3);
  assert.equal(linesOf("\n\n"), 2);
});

Deno.test("capFor: today's count plus 5%, rounded up to a multiple of 100", () => {
  assert.equal(capFor(0), 0);
  assert.equal(capFor(1), 100);
  assert.equal(capFor(935), 1000);
  assert.equal(capFor(952), 1000);
  assert.equal(capFor(953), 1100);
  assert.equal(capFor(10_779), 11_400);
});

Deno.test("line caps: passes under the caps, prints each folder and the ir+compiler+runtime sum", async () => {
  await withTemp(async (root) => {
    await makeTree(root);
    const caps = `${root}/caps.json`;
    await Deno.writeTextFile(caps, JSON.stringify({ ir: 30, compiler: 200, runtime: 100, web: 10 }));
    const r = await lineCount(["--root", root, "--caps", caps]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr, "");
    assert.match(r.stdout, /^ir\/\s+30\s+30$/m);
    assert.match(r.stdout, /^compiler\/\s+120\s+200$/m);
    assert.match(r.stdout, /^runtime\/\s+10\s+100$/m);
    assert.doesNotMatch(r.stdout, /node_modules|hidden|docs|web/);
    assert.match(r.stdout, /ir \+ compiler \+ runtime: 160 lines; target 15,000 \(14,840 under/);
  });
});

Deno.test("line caps: one line over a cap fails, naming the folder", async () => {
  await withTemp(async (root) => {
    await makeTree(root);
    const caps = `${root}/caps.json`;
    await Deno.writeTextFile(caps, JSON.stringify({ ir: 30, compiler: 119, runtime: 100 }));
    const r = await lineCount(["--root", root, "--caps", caps]);
    assert.equal(r.code, 1);
    assert.match(r.stdout, /^compiler\/\s+120\s+119\s+OVER by 1$/m);
    assert.equal(r.stderr.trim(), `error: compiler/ has 120 lines, over its cap of 119 in ${caps}`);
  });
});

Deno.test("line caps: a folder of TypeScript without a cap fails, naming it", async () => {
  await withTemp(async (root) => {
    await makeTree(root);
    await Deno.mkdir(`${root}/web`);
    await Deno.writeTextFile(`${root}/web/app.ts`, lines(5));
    const caps = `${root}/caps.json`;
    await Deno.writeTextFile(caps, JSON.stringify({ ir: 30, compiler: 200, runtime: 100 }));
    const r = await lineCount(["--root", root, "--caps", caps]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^error: web\/ has 5 lines of TypeScript and no cap in /m);
  });
});

Deno.test("line caps: a bad caps file is one error line", async () => {
  await withTemp(async (root) => {
    await makeTree(root);
    const caps = `${root}/caps.json`;
    await Deno.writeTextFile(caps, JSON.stringify({ ir: "many" }));
    const r = await lineCount(["--root", root, "--caps", caps]);
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr.trim(),
      `error: ${caps}: the cap of "ir" must be a non-negative integer, got "many"`,
    );
    const missing = await lineCount(["--root", root, "--caps", `${root}/none.json`]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /^error: .*none\.json: cannot read the caps/);
  });
});

Deno.test("line caps: --write-caps rewrites the table from today's counts, under ROOT/tools by default", async () => {
  await withTemp(async (root) => {
    await makeTree(root);
    await Deno.mkdir(`${root}/tools`);
    const r = await lineCount(["--root", root, "--write-caps"]);
    assert.equal(r.code, 0, r.stderr);
    const text = await Deno.readTextFile(`${root}/tools/line_caps.json`);
    assert.deepEqual(JSON.parse(text), { ir: 100, compiler: 200, runtime: 100 });
    assert.equal(text, JSON.stringify({ ir: 100, compiler: 200, runtime: 100 }, null, 2) + "\n");
  });
});
