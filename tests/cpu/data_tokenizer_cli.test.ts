/** `deno task tokenize` as a user runs it: a subprocess, its output file, its exit code and messages. */
import assert from "node:assert/strict";
import { ROOT, runCli, withTemp } from "../util/cli.ts";

const tokenize = (...args: string[]) => runCli("tokenize.ts", args);

const golden: { text: string; tokens: string[]; ids: number[]; cased_ids: number[] }[] =
  (await Deno.readTextFile(
    `${ROOT}tests/fixtures/tokenizer/golden.jsonl`,
  )).trim().split("\n").map((l) => JSON.parse(l));

Deno.test("tokenize writes one JSON line per input line, equal to the golden ids", () =>
  withTemp(async (dir) => {
    // Repeated so that the input spans several read chunks, with multi-byte characters across their edges.
    const once = golden.filter((g) => !/[\n\r]/.test(g.text));
    assert.ok(once.length > 180);
    const rows = Array.from({ length: 12 }, () => once).flat();
    await Deno.writeTextFile(`${dir}/in.txt`, rows.map((g) => g.text).join("\n") + "\n");
    const r = await tokenize("--input", `${dir}/in.txt`, "--output", `${dir}/out.jsonl`);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, new RegExp(`tokenized ${rows.length} lines, \\d+ tokens .* tokens/s`));
    const out = (await Deno.readTextFile(`${dir}/out.jsonl`)).split("\n");
    assert.equal(out.pop(), "");
    assert.equal(out.length, rows.length);
    out.forEach((l, i) => assert.deepEqual(JSON.parse(l), { tokens: rows[i].tokens, ids: rows[i].ids }));
    assert.deepEqual((await Array.fromAsync(Deno.readDir(dir))).map((e) => e.name).sort(), [
      "in.txt",
      "out.jsonl",
    ]);

    const c = await tokenize("--input", `${dir}/in.txt`, "--output", `${dir}/cased.jsonl`, "--cased");
    assert.equal(c.code, 0, c.stderr);
    const cased = (await Deno.readTextFile(`${dir}/cased.jsonl`)).trim().split("\n").map((l) =>
      JSON.parse(l).ids
    );
    assert.deepEqual(cased, rows.map((g) => g.cased_ids));
  }));

Deno.test("tokenize with a user's vocab.txt", () =>
  withTemp(async (dir) => {
    await Deno.writeTextFile(`${dir}/v.txt`, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n##s\n,\n");
    await Deno.writeTextFile(`${dir}/in.txt`, "Hellos, hello\n\nbye");
    const r = await tokenize(
      "--input",
      `${dir}/in.txt`,
      "--output",
      `${dir}/o.jsonl`,
      "--vocab",
      `${dir}/v.txt`,
    );
    assert.equal(r.code, 0, r.stderr);
    assert.equal(
      await Deno.readTextFile(`${dir}/o.jsonl`),
      '{"tokens":["hello","##s",",","hello"],"ids":[5,6,7,5]}\n{"tokens":[],"ids":[]}\n' +
        '{"tokens":["[UNK]"],"ids":[1]}\n',
    );
  }));

Deno.test("tokenize: user mistakes are one line and exit code 1, and leave no output", () =>
  withTemp(async (dir) => {
    await Deno.writeTextFile(`${dir}/in.txt`, "hello\n");
    await Deno.writeFile(`${dir}/bad.txt`, new Uint8Array([0x68, 0x69, 0x0a, 0xff, 0xfe, 0x0a]));
    await Deno.writeTextFile(`${dir}/v.json`, "{ not json");
    const io = ["--input", `${dir}/in.txt`, "--output", `${dir}/o.jsonl`];
    const cases: [string[], RegExp][] = [
      [
        ["--input", `${dir}/nope.txt`, "--output", `${dir}/o.jsonl`],
        /^error: input file not found: .*nope\.txt$/,
      ],
      [["--input", "/dev/zero", "--output", `${dir}/o.jsonl`], /\/dev\/zero: line 1 is over 64 MiB/],
      [[...io, "--vocab", "/dev/zero"], /vocab \/dev\/zero: over 511 MiB, the most one run reads/],
      [["--input", dir, "--output", `${dir}/o.jsonl`], /is a directory$/],
      [["--output", `${dir}/o.jsonl`], /^error: --input FILE is required/],
      [["--input", `${dir}/in.txt`], /^error: --output FILE is required/],
      [[...io, "--max"], /^error: Unknown option '--max'/],
      [
        ["--input", `${dir}/in.txt`, "--output", `${dir}/no/o.jsonl`],
        /cannot write .*: its directory does not exist$/,
      ],
      [[...io, "--vocab", `${dir}/v.json`], /v\.json: invalid JSON/],
      [[...io, "--vocab", `${dir}/nov.txt`], /vocab file not found/],
      [
        ["--input", `${dir}/bad.txt`, "--output", `${dir}/o.jsonl`],
        /bad\.txt: line 2 is not valid UTF-8$/,
      ],
    ];
    for (const [args, re] of cases) {
      const r = await tokenize(...args);
      assert.equal(r.code, 1, `${args.join(" ")}: ${r.stderr}`);
      assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
      assert.match(r.stderr.trim(), re);
    }
    const left = (await Array.fromAsync(Deno.readDir(dir))).map((e) => e.name).sort();
    assert.deepEqual(left, ["bad.txt", "in.txt", "v.json"]);
    const help = await tokenize("--help");
    assert.equal(help.code, 0);
    assert.match(help.stdout, /--input FILE --output FILE\.jsonl \[--vocab FILE\] \[--cased\]/);
  }));
