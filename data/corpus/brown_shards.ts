/**
 * The built-in pretraining data of deno task train: the Brown corpus, the sentiment set's train text, or
 * nlp-corpus (sentiment_text.ts), made into shards once, into a cache directory, and reused afterwards. A
 * cached directory is reused only when its manifest (written last, so present only when complete) matches
 * the settings, the generator version and the tokenizer's vocabulary, and every shard it lists is there with
 * its size; otherwise it is made again.
 */
import { join } from "node:path";
import { DEFAULT_SETTINGS, GENERATOR, type Phase, prepareData } from "../pretraining/prepare.ts";
import { manifestSettings } from "../pretraining/prepare.ts";
import { tokenizerFor } from "../pretraining/tasks.ts";
import { vocabHash } from "../pretraining/vocab.ts";
import { type Manifest, readManifest } from "../shards/manifest.ts";
import { defaultCacheDir } from "./cache.ts";
import { nlpCorpusText, sentimentTrainText } from "./sentiment_text.ts";

export const BUILT_IN_CORPORA = ["brown", "sentiment-train", "nlp-corpus"] as const;
export type BuiltInCorpus = typeof BUILT_IN_CORPORA[number];
/** Each corpus's text (prepare-data reads Brown itself) and the settings it changes. */
const CORPORA: Record<
  BuiltInCorpus,
  { text?: () => Promise<string>; set?: Partial<typeof DEFAULT_SETTINGS> }
> = {
  brown: {},
  // The sentiment text's 36k tokens in shards of 3,000: twelve, so the last is a held-out one (heldout.ts).
  "sentiment-train": { text: sentimentTrainText, set: { shardTokens: 3_000 } },
  // 2.1M tokens; 3 copies of each document's instances make 151k, 1.6 passes of 7,500 steps of 32.
  "nlp-corpus": { text: nlpCorpusText, set: { dupeFactor: 3 } },
};

export interface BrownShardOptions {
  /** Default brown. */
  corpus?: BuiltInCorpus;
  /** Parent of the shard directory (default out/data/ at the repository's root). */
  cacheDir?: string;
  maxSeqLength?: number;
  maxPredictionsPerSeq?: number;
  dupeFactor?: number;
  wholeWordMask?: boolean;
  seed?: number;
  cased?: boolean;
  /** Only how fast it is made; the shards are the same for any value. */
  workers?: number;
  onProgress?: (phase: Phase, done: number, total: number) => void;
}

/** The options over the defaults; an option given as undefined keeps its default. */
function settingsOf(o: BrownShardOptions) {
  const s = { ...DEFAULT_SETTINGS, ...CORPORA[o.corpus ?? "brown"].set };
  for (const k of ["maxSeqLength", "maxPredictionsPerSeq", "dupeFactor", "seed"] as const) {
    if (o[k] !== undefined) s[k] = o[k];
  }
  if (o.wholeWordMask !== undefined) s.wholeWordMask = o.wholeWordMask;
  return s;
}

/** The directory name: brown-s128 for the defaults, with the settings that differ appended. */
export function brownShardDirName(o: BrownShardOptions = {}): string {
  const s = settingsOf(o);
  let name = `${o.corpus ?? "brown"}-s${s.maxSeqLength}`;
  if (s.maxPredictionsPerSeq !== DEFAULT_SETTINGS.maxPredictionsPerSeq) name += `-p${s.maxPredictionsPerSeq}`;
  if (s.dupeFactor !== DEFAULT_SETTINGS.dupeFactor) name += `-d${s.dupeFactor}`;
  if (s.seed !== DEFAULT_SETTINGS.seed) name += `-seed${s.seed}`;
  if (s.wholeWordMask) name += "-wwm";
  if (o.cased) name += "-cased";
  return name;
}

/** Makes the Brown shards if the cache lacks them (seconds), and returns their directory. */
export async function ensureBrownShards(opts: BrownShardOptions = {}): Promise<string> {
  const s = settingsOf(opts);
  const cacheDir = opts.cacheDir ?? defaultCacheDir();
  const dir = join(cacheDir, brownShardDirName(opts));
  const tok = await tokenizerFor({ cased: opts.cased ?? false });
  const makeText = CORPORA[opts.corpus ?? "brown"].text;
  const want = manifestSettings(s);
  const existing = await readManifest(dir).catch(() => undefined);
  if (existing && await reusable(dir, existing, want, await vocabHash(tok))) return dir;
  const text = join(cacheDir, `${opts.corpus}.txt`);
  if (makeText) {
    await Deno.mkdir(cacheDir, { recursive: true });
    await Deno.writeTextFile(text, await makeText());
  }
  await prepareData({
    inputs: makeText ? [text] : [],
    shardTokens: s.shardTokens,
    output: dir,
    cacheDir,
    cased: opts.cased,
    workers: opts.workers,
    onProgress: opts.onProgress,
    maxSeqLength: s.maxSeqLength,
    maxPredictionsPerSeq: s.maxPredictionsPerSeq,
    dupeFactor: s.dupeFactor,
    wholeWordMask: s.wholeWordMask,
    seed: s.seed,
  });
  return dir;
}

async function reusable(dir: string, m: Manifest, want: object, vocabSha: string): Promise<boolean> {
  if (m.generator !== GENERATOR || m.tokenizer?.vocab_sha256 !== vocabSha) return false;
  const settings = m.settings as unknown as Record<string, unknown>;
  if (Object.entries(want).some(([k, v]) => settings?.[k] !== v)) return false;
  for (const shard of m.shards) {
    const size = await Deno.stat(join(dir, shard.file)).then((st) => st.size).catch(() => -1);
    if (size !== shard.bytes) return false;
  }
  return true;
}
