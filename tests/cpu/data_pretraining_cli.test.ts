/**
 * `deno task prepare-data` and `deno task data-dump` as a user runs them, with the permissions of their
 * task entries: output files, JSON lines, the summary with tokens/s, and one-line errors with exit 1.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { brownCorpusText } from "../../data/corpus/brown.ts";
import { readManifest } from "../../data/shards/manifest.ts";
import { ShardFile } from "../../data/shards/reader.ts";
import { runCli } from "../util/cli.ts";

const prepare = (...args: string[]) => runCli("prepare_data.ts", args);
const dump = (...args: string[]) => runCli("data_dump.ts", args, ["--allow-read", "--allow-env"]);

/** One line "error: ..." on stderr and exit code 1. */
function assertUserError(r: { code: number; stderr: string }, pattern: RegExp) {
  assert.equal(r.code, 1, r.stderr);
  const lines = r.stderr.trim().split("\n").filter((l) =>
    !l.startsWith("reading") && !l.startsWith("tokenizing")
  );
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0], /^error: /);
  assert.match(lines[0], pattern);
}

const dir = await Deno.makeTempDir({ prefix: "bertfuse-cli-" });
globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
const input = join(dir, "in.txt");
await Deno.writeTextFile(input, (await brownCorpusText()).split("\n\n").slice(0, 20).join("\n\n"));

Deno.test("prepare-data writes shards and a manifest and reports tokens/s; data-dump prints them", async () => {
  const out = join(dir, "shards");
  const settings = "--dupe-factor 2 --workers 2 --seed 9".split(" ");
  const r = await prepare("--input", input, "--output", out, ...settings);
  assert.equal(r.code, 0, r.stderr);
  // The same text from standard input (--input -) gives the same shard.
  const piped = await runCli(
    "prepare_data.ts",
    ["--input", "-", "--output", `${out}-stdin`, ...settings],
    undefined,
    input,
  );
  assert.equal(piped.code, 0, piped.stderr);
  assert.match(r.stdout, /20 documents, \d+ sentences, \d+ tokens -> \d+ instances/);
  assert.match(r.stdout, /M input tokens\/s, [\d.]+M instance tokens\/s/);
  assert.match(r.stderr, /making shards +\[#+\]/);
  const m = await readManifest(out);
  assert.equal(m.settings.seed, 9);
  assert.equal(m.settings.dupe_factor, 2);

  const d = await dump("--input", out, "--limit", "5", "--tokens");
  assert.equal(d.code, 0, d.stderr);
  const lines = d.stdout.trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(lines.length, 5);
  const shardBytes = (d: string) => Deno.readFile(join(d, m.shards[0].file));
  assert.deepEqual(await shardBytes(`${out}-stdin`), await shardBytes(out));
  const shard = ShardFile.open(join(out, m.shards[0].file));
  lines.forEach((x, i) => {
    const keys =
      "input_ids token_type_ids attention_mask masked_lm_positions masked_lm_ids next_sentence_label";
    assert.deepEqual(Object.keys(x), [...keys.split(" "), "tokens"]);
    const rec = shard.instance(i);
    assert.deepEqual(x.input_ids, rec.inputIds);
    assert.equal(x.token_type_ids.length, x.input_ids.length);
    assert.equal(x.token_type_ids.indexOf(1), rec.segmentBStart);
    assert.ok(x.attention_mask.every((v: number) => v === 1));
    assert.deepEqual(x.masked_lm_positions, rec.maskedLmPositions);
    assert.deepEqual(x.masked_lm_ids, rec.maskedLmIds);
    assert.equal(x.tokens[0], "[CLS]");
    assert.equal(x.tokens.at(-1), "[SEP]");
    assert.equal(x.tokens.filter((t: string) => t === "[SEP]").length >= 2, true);
  });
  shard.close();
  const all = await dump("--input", out);
  assert.equal(all.stdout.trim().split("\n").length, m.records);
});

Deno.test("prepare-data: bad flags and inputs are one-line errors with exit code 1", async () => {
  const out = join(dir, "never");
  const refused = async (re: RegExp, from: string, ...args: string[]) =>
    assertUserError(await prepare("--input", from, "--output", out, ...args), re);
  await refused(/--masked-lm-prob/, input, "--masked-lm-prob", "1.5");
  await refused(/--dupe-factor/, input, "--dupe-factor", "0");
  await refused(/--seed/, input, "--seed", "-1");
  await refused(/at least 5/, input, "--max-seq-length", "3");
  await refused(/nonsense/, input, "--nonsense");
  assertUserError(await prepare("--input", input), /--output DIR is required/);
  await refused(/missing\.txt: no such file/, join(dir, "missing.txt"));
  const empty = join(dir, "empty.txt");
  await Deno.writeTextFile(empty, "\n\n   \n");
  await refused(/has no sentences/, empty);
  const binary = join(dir, "random.bin"); // fresh random bytes are not UTF-8 (a 4 KiB run almost surely)
  await Deno.writeFile(binary, crypto.getRandomValues(new Uint8Array(4096)));
  await refused(/random\.bin: not UTF-8 text \(byte \d+/, binary);
  // Devices that never end are refused from their first bytes, not read whole (9 GB in 12 s before).
  await refused(/\/dev\/zero: byte 0 is a NUL/, "/dev/zero");
  await refused(/\/dev\/urandom: (not UTF-8 text \(byte \d+|byte \d+ is a NUL)/, "/dev/urandom");
  const huge = join(dir, "huge.txt"); // sparse: its size says it is over the limit before a byte is read
  await Deno.writeTextFile(huge, "a cat .\n").then(() => Deno.truncate(huge, 2 ** 29));
  await refused(/huge\.txt: the inputs pass 511 MiB, the most one run reads$/, huge);
  // 7-bit noise is valid UTF-8, but a fifth control characters (D05).
  const noise = join(dir, "noise.txt"), bytes = Array.from({ length: 4096 }, (_, i) => i % 127 + 1);
  await Deno.writeTextFile(noise, "a cat .\n" + String.fromCharCode(...bytes));
  await refused(/noise\.txt: byte 8 is control character 0x01, as are \d+% of its characters/, noise);
  await refused(/nope\.txt/, input, "--vocab", join(dir, "nope.txt"));
  await assert.rejects(() => Deno.stat(out), Deno.errors.NotFound);
});

Deno.test("data-dump: missing or damaged data is a one-line error", async () => {
  assertUserError(await dump("--input", join(dir, "none")), /manifest\.json/);
  assertUserError(await dump(), /--input DIR is required/);
  const out = join(dir, "dmg");
  assert.equal((await prepare("--input", input, "--output", out, "--dupe-factor", "1", "--quiet")).code, 0);
  const m = await readManifest(out);
  const file = join(out, m.shards[0].file);
  const bytes = await Deno.readFile(file);
  await Deno.writeFile(file, bytes.subarray(0, bytes.length - 1));
  assertUserError(await dump("--input", out), new RegExp(`${m.shards[0].file}.*truncated.*byte offset`));
});
