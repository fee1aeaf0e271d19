/**
 * deno task prepare-data: text in BERT's format -> pretraining shards. Flag parsing and reporting only;
 * the work is data/pretraining/prepare.ts.
 */
import { join } from "node:path";
import { parseFlags, positiveInt, runMain, UsageError } from "./common.ts";
import { brownShardDirName } from "../data/corpus/brown_shards.ts";
import { defaultCacheDir } from "../data/corpus/cache.ts";
import { DEFAULT_SETTINGS, prepareData } from "../data/pretraining/prepare.ts";
import { progressBar } from "../data/pretraining/progress.ts";
import { checkDirOutput } from "../model_io/outputs.ts";

/** Whether a folder holds shards of ours (their manifest), so a new run may replace them. */
async function isShardFolder(dir: string): Promise<boolean> {
  const m = JSON.parse(await Deno.readTextFile(join(dir, "manifest.json")));
  return m?.format === "bertfuse-pretraining-shards";
}
import { kebabFlags } from "./flag_spelling.ts";

const D = DEFAULT_SETTINGS;
const HELP = `
deno task prepare-data [--input FILES|DIR|brown] --output DIR [--max-seq-length ${D.maxSeqLength}]
                       [--max-predictions-per-seq ${D.maxPredictionsPerSeq}] [--masked-lm-prob ${D.maskedLmProb}]
                       [--dupe-factor ${D.dupeFactor}] [--short-seq-prob ${D.shortSeqProb}] [--whole-word-mask]
                       [--seed S] [--workers N] [--vocab FILE] [--cased] [--shard-tokens N] [--quiet]

Makes BERT pretraining instances (sentence pairs for next-sentence prediction, masked tokens) the way
Google's create_pretraining_data.py does and writes them as shards (docs/shard-format.md) with a
manifest.json, which deno task data-dump prints and the training loader reads.

  --input X            text files in BERT's format: one sentence per line, a blank line between
                       documents. Repeat the flag or separate with commas; a directory means all its
                       files; - reads standard input. "brown" or no --input: the built-in Brown corpus.
  --output DIR         where the shards go: absent, empty, or the shards of an earlier run (replaced);
                       never an input, nor a folder of other files. Default for the Brown corpus: the cache deno task train reads,
                       out/data/brown-s128 (the name lists settings that differ from the defaults)
  --max-seq-length N   tokens per instance, [CLS] and [SEP]s included (default ${D.maxSeqLength})
  --max-predictions-per-seq N   masked positions at most (default ${D.maxPredictionsPerSeq})
  --masked-lm-prob P   fraction of tokens masked (default ${D.maskedLmProb})
  --dupe-factor N      passes over the input, each masked differently (default ${D.dupeFactor})
  --short-seq-prob P   chance of a shorter target length per document (default ${D.shortSeqProb})
  --whole-word-mask    mask all WordPieces of a word together
  --seed S             seed of every random choice (default ${D.seed}); the output depends only on the
                       input, the settings and the seed, not on --workers
  --workers N          threads for tokenizing and making shards: this one and N - 1 Web Workers
                       (default 1; at most the number of CPU cores)
  --vocab FILE         vocab.txt or tokenizer.json (default: built-in bert-base-uncased)
  --cased              keep case and accents
  --shard-tokens N     input tokens per shard (default ${D.shardTokens}); decides how documents are
                       grouped, so it is part of the output's identity like the seed
  --quiet              no progress bar

Progress goes to stderr; a summary with tokens/s to stdout.
`;

function number(
  flag: string,
  v: string | undefined,
  fallback: number,
  ok: (x: number) => boolean,
  want: string,
) {
  if (v === undefined) return fallback;
  const x = Number(v);
  if (v.trim() === "" || !Number.isFinite(x) || !ok(x)) {
    throw new UsageError(`--${flag} must be ${want}, got '${v}'`);
  }
  return x;
}

async function main() {
  const { values } = parseFlags(kebabFlags(Deno.args), {
    input: { type: "string", multiple: true },
    output: { type: "string" },
    "max-seq-length": { type: "string" },
    "max-predictions-per-seq": { type: "string" },
    "masked-lm-prob": { type: "string" },
    "dupe-factor": { type: "string" },
    "short-seq-prob": { type: "string" },
    "whole-word-mask": { type: "boolean" },
    seed: { type: "string" },
    workers: { type: "string" },
    vocab: { type: "string" },
    cased: { type: "boolean" },
    "shard-tokens": { type: "string" },
    quiet: { type: "boolean" },
  }, HELP);
  const inputs = (values.input ?? []).flatMap((s) => s.split(",")).map((s) => s.trim()).filter((s) => s);
  const brown = inputs.length === 0 || (inputs.length === 1 && inputs[0] === "brown");
  const maxSeqLength = positiveInt("max-seq-length", values["max-seq-length"], D.maxSeqLength);
  if (maxSeqLength < 5) throw new UsageError(`--max-seq-length must be at least 5, got ${maxSeqLength}`);
  const maxPredictionsPerSeq = positiveInt("max-predictions-per-seq", values["max-predictions-per-seq"], 20);
  if (maxPredictionsPerSeq > maxSeqLength) {
    throw new UsageError(
      `--max-predictions-per-seq ${maxPredictionsPerSeq} exceeds --max-seq-length ${maxSeqLength}`,
    );
  }
  const num = (flag: string, fallback: number, ok: (x: number) => boolean, want: string) =>
    number(flag, values[flag as "masked-lm-prob"], fallback, ok, want);
  const settings = {
    maxSeqLength,
    maxPredictionsPerSeq,
    maskedLmProb: num("masked-lm-prob", D.maskedLmProb, (x) => x > 0 && x <= 1, "in (0, 1]"),
    dupeFactor: positiveInt("dupe-factor", values["dupe-factor"], D.dupeFactor),
    shortSeqProb: num("short-seq-prob", D.shortSeqProb, (x) => x >= 0 && x <= 1, "in [0, 1]"),
    wholeWordMask: values["whole-word-mask"] ?? false,
    seed: num("seed", D.seed, (x) => Number.isSafeInteger(x) && x >= 0, "a non-negative integer"),
    shardTokens: positiveInt("shard-tokens", values["shard-tokens"], D.shardTokens),
    cased: values.cased ?? false,
  };
  // Brown with settings that the cache's directory names cover goes where deno task train looks for it.
  const cacheable = brown && values.vocab === undefined && settings.maskedLmProb === D.maskedLmProb &&
    settings.shortSeqProb === D.shortSeqProb && settings.shardTokens === D.shardTokens;
  const output = values.output ??
    (cacheable ? join(defaultCacheDir(), brownShardDirName(settings)) : undefined);
  if (output === undefined) {
    throw new UsageError(
      brown
        ? "--output DIR is required for the Brown corpus with --vocab, --masked-lm-prob, --short-seq-prob or --shard-tokens"
        : "--output DIR is required (see --help)",
    );
  }
  await checkDirOutput(output, {
    label: `--output ${output}`,
    inputs: brown ? [values.vocab] : [...inputs, values.vocab],
    isOurs: isShardFolder,
    oursLooksLike: "a shard folder of deno task prepare-data (manifest.json)",
  });
  // More threads than cores only adds isolates to start (1,000 of them never finish starting).
  const cores = navigator.hardwareConcurrency || 1;
  let workers = positiveInt("workers", values.workers, 1);
  if (workers > cores) {
    console.error(`--workers ${workers}: this machine has ${cores} cores; using ${cores}`);
    workers = cores;
  }
  const result = await prepareData({
    ...settings,
    inputs: brown ? [] : inputs,
    output,
    workers,
    vocab: values.vocab,
    onProgress: values.quiet ? undefined : progressBar(),
  });
  const m = result.manifest, s = result.seconds.total;
  const mb = m.shards.reduce((n, x) => n + x.bytes, 0) / 1e6;
  const rate = (n: number) => `${(n / s / 1e6).toFixed(2)}M`;
  console.log(
    `prepare-data: ${m.input.documents} documents, ${m.input.sentences} sentences, ${m.input.tokens} tokens -> ` +
      `${m.records} instances (${m.tokens} tokens) in ${m.shards.length} shards, ${
        mb.toFixed(1)
      } MB, ${output}`,
  );
  console.log(
    `  ${s.toFixed(2)} s: ${rate(m.input.tokens)} input tokens/s, ${rate(m.tokens)} instance tokens/s ` +
      `(read ${result.seconds.read.toFixed(2)} s, tokenize ${result.seconds.tokenize.toFixed(2)} s, ` +
      `shards ${result.seconds.shards.toFixed(2)} s)`,
  );
}

if (import.meta.main) await runMain(main);
