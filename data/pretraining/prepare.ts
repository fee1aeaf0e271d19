/**
 * prepare-data as a library call: input text -> tokenized corpus -> shard plan -> shards -> manifest.
 * Work is split into tasks (tokenizing pieces of the input, making shards) that run in Web Workers when
 * workers > 1 and in this thread otherwise; the output is the same either way (see plan.ts).
 */
import { dirname, join, resolve } from "node:path";
import { acquireLock, io, type Lock } from "../../model_io/outputs.ts";
import { BROWN_SOURCE, brownCorpusText } from "../corpus/brown.ts";
import { MAX_SEQ_LENGTH_LIMIT, recordLayout } from "../shards/format.ts";
import { DataError } from "../shards/errors.ts";
import { crcHex } from "../shards/crc32.ts";
import { type Manifest, MANIFEST_FORMAT, MANIFEST_NAME, writeManifest } from "../shards/manifest.ts";
import type { InstanceSettingsRecord } from "../shards/manifest.ts";
import { isTempName } from "../shards/writer.ts";
import type { ShardJob, ShardResult } from "./build_shard.ts";
import {
  joinChunks,
  listInputFiles,
  numDocuments,
  numSentences,
  numTokens,
  readInputText,
  splitAtDocuments,
  type TokenCorpus,
  tokenizeChunk,
  type TokenizedChunk,
} from "./documents.ts";
import type { MaskStats } from "./masking.ts";
import { planShards, shardFileName } from "./plan.ts";
import { WorkerPool } from "./pool.ts";
import { runTask, tokenizerFor, type TokenizerSpec } from "./tasks.ts";
import { shardVocab, vocabHash } from "./vocab.ts";

/** Bump when a change to the algorithm changes the output for the same settings (invalidates caches). */
export const GENERATOR = "bertfuse-prepare-data/1";

export interface PrepareSettings {
  maxSeqLength: number;
  maxPredictionsPerSeq: number;
  maskedLmProb: number;
  dupeFactor: number;
  shortSeqProb: number;
  wholeWordMask: boolean;
  seed: number;
  /** Corpus tokens per shard (before dupe_factor); decides the shard plan, so it is part of the output. */
  shardTokens: number;
}

export const DEFAULT_SETTINGS: PrepareSettings = {
  maxSeqLength: 128,
  maxPredictionsPerSeq: 20,
  maskedLmProb: 0.15,
  dupeFactor: 10,
  shortSeqProb: 0.1,
  wholeWordMask: false,
  seed: 12345,
  shardTokens: 100_000,
};

export type Phase = "read" | "tokenize" | "shards";

export interface PrepareOptions extends Partial<PrepareSettings> {
  /** Files or directories; "brown" (or an empty list) is the built-in Brown corpus. */
  inputs: string[];
  output: string;
  /** A vocab.txt or tokenizer.json; the built-in bert-base-uncased vocabulary when omitted. */
  vocab?: string;
  cased?: boolean;
  workers?: number;
  /** Where the Brown corpus text is cached (brown.ts); null: not at all. */
  cacheDir?: string | null;
  onProgress?: (phase: Phase, done: number, total: number) => void;
}

export interface PrepareResult {
  manifest: Manifest;
  dir: string;
  seconds: { read: number; tokenize: number; shards: number; total: number };
  masking: MaskStats;
  randomNext: number;
  forcedRandomNext: number;
}

/** The settings as the manifest records them (and a cache compares them): each name in snake case. */
export function manifestSettings(s: PrepareSettings): InstanceSettingsRecord {
  const snake = (k: string) => k.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase());
  const entries = Object.entries(s).map(([k, v]) => [snake(k), v]);
  return Object.fromEntries(entries) as unknown as InstanceSettingsRecord;
}

export function checkSettings(s: PrepareSettings): void {
  const bad = (what: string): never => {
    throw new DataError(what);
  };
  const int = (v: number, lo: number, hi: number, name: string) => {
    if (!Number.isInteger(v) || v < lo || v > hi) bad(`${name} must be an integer in ${lo}..${hi}, got ${v}`);
  };
  int(s.maxSeqLength, 5, MAX_SEQ_LENGTH_LIMIT, "max_seq_length");
  int(s.maxPredictionsPerSeq, 1, s.maxSeqLength, "max_predictions_per_seq");
  int(s.dupeFactor, 1, 10_000, "dupe_factor");
  int(s.seed, 0, Number.MAX_SAFE_INTEGER, "seed");
  int(s.shardTokens, 1, Number.MAX_SAFE_INTEGER, "shard_tokens");
  if (!(s.maskedLmProb > 0 && s.maskedLmProb <= 1)) {
    bad(`masked_lm_prob must be in (0, 1], got ${s.maskedLmProb}`);
  }
  if (!(s.shortSeqProb >= 0 && s.shortSeqProb <= 1)) {
    bad(`short_seq_prob must be in [0, 1], got ${s.shortSeqProb}`);
  }
}

export async function prepareData(opts: PrepareOptions): Promise<PrepareResult> {
  const settings: PrepareSettings = { ...DEFAULT_SETTINGS };
  for (const k of Object.keys(DEFAULT_SETTINGS) as (keyof PrepareSettings)[]) {
    if (opts[k] !== undefined) (settings as unknown as Record<string, unknown>)[k] = opts[k];
  }
  checkSettings(settings);
  const workers = opts.workers ?? 1;
  if (!Number.isInteger(workers) || workers < 1) throw new DataError(`workers must be a positive integer`);
  const progress = opts.onProgress ?? (() => {});
  const spec: TokenizerSpec = { vocab: opts.vocab, cased: opts.cased ?? false };
  const t0 = performance.now();

  const builtIn = opts.inputs.length === 0 || (opts.inputs.length === 1 && opts.inputs[0] === "brown");
  const files = builtIn ? [] : await listInputFiles(opts.inputs);
  // Workers start first, so that starting their isolates overlaps reading the input; tasks posted
  // before a worker is up wait in its queue while this thread already works on its own share.
  const pool = workers > 1 ? new WorkerPool(workers) : undefined;
  let lock: Lock | undefined;
  try {
    // ---- read ----
    const text = builtIn ? await brownCorpusText({ cacheDir: opts.cacheDir }) : await readInputText(files);
    const sources = builtIn ? [BROWN_SOURCE] : files;
    const tok = await tokenizerFor(spec);
    const t1 = performance.now();
    progress("read", 1, 1);

    // ---- tokenize ----
    let chunks: TokenizedChunk[];
    if (pool) {
      const pieces = splitAtDocuments(text, workers * 4);
      let done = 0;
      chunks = await Promise.all(pieces.map(async (piece) => {
        const c = await pool.run({ kind: "tokenize", tokenizer: spec, text: piece });
        progress("tokenize", ++done, pieces.length);
        return c;
      }));
    } else {
      chunks = [tokenizeChunk(tok, text)];
      progress("tokenize", 1, 1);
    }
    const corpus = joinChunks(chunks, pool !== undefined);
    if (numTokens(corpus) === 0) {
      const expected = "expected one sentence per line, a blank line between documents";
      throw new DataError(`input ${sources.join(", ")} has no sentences (${expected})`);
    }
    // The new shards and manifest are written to a folder of this run's inside the output, and replace an
    // earlier run's only once complete: a failure or a kill leaves the earlier output as it was.
    // The folder's lock stops a second run writing there; a run's folder left behind is a killed run's.
    const created = await makeOutputDir(opts.output), staging = join(opts.output, `${STAGING}${Deno.pid}`);
    lock = await acquireLock(opts.output, "prepare-data");
    for await (const e of Deno.readDir(opts.output)) {
      if (e.isDirectory && e.name.startsWith(STAGING)) {
        await Deno.remove(join(opts.output, e.name), { recursive: true });
      }
    }
    await Deno.mkdir(staging);
    const t2 = performance.now();

    // ---- shards ----
    const vocab = shardVocab(tok, settings.wholeWordMask);
    const plan = planShards(corpus, settings.seed, settings.shardTokens);
    const jobs: ShardJob[] = plan.map((docs, index) => ({
      index,
      docs,
      path: join(staging, shardFileName(index)),
      seed: settings.seed,
      dupeFactor: settings.dupeFactor,
      settings,
      vocab,
    }));
    let done = 0;
    progress("shards", 0, jobs.length);
    const results: ShardResult[] = [];
    const runJob = async (job: ShardJob) => {
      const task = { kind: "shard" as const, corpus, job };
      const r = pool ? await pool.run(task) : await runTask(task);
      progress("shards", ++done, jobs.length);
      return r;
    };
    let manifest: Manifest;
    try {
      // All tasks settle before anything is reported, so no worker is stopped halfway through a file.
      if (pool) {
        const settled = await Promise.allSettled(jobs.map(runJob));
        const failed = settled.find((r) => r.status === "rejected");
        if (failed) throw (failed as PromiseRejectedResult).reason;
        results.push(...settled.map((r) => (r as PromiseFulfilledResult<ShardResult>).value));
      } else for (const job of jobs) results.push(await runJob(job));
      manifest = await finish(staging, settings, tok, spec, sources, corpus, results);
      await swapIn(staging, opts.output, manifest);
    } catch (e) {
      // Nothing partial stays (a full disk, F06): this run's folder goes, and the folders it created too
      // (each only if empty: never a user's file).
      await Deno.remove(staging, { recursive: true }).catch(() => {});
      await lock?.release(); // its file would keep the folder from being removed
      lock = undefined;
      for (const d of created) await Deno.remove(d).catch(() => {});
      throw e;
    }
    const t3 = performance.now();
    const sum = (f: (r: ShardResult) => number) => results.reduce((s, r) => s + f(r), 0);
    return {
      manifest,
      dir: opts.output,
      seconds: {
        read: (t1 - t0) / 1000,
        tokenize: (t2 - t1) / 1000,
        shards: (t3 - t2) / 1000,
        total: (performance.now() - t0) / 1000,
      },
      masking: {
        masked: sum((r) => r.masking.masked),
        replacedByMask: sum((r) => r.masking.replacedByMask),
        keptOriginal: sum((r) => r.masking.keptOriginal),
        replacedByRandom: sum((r) => r.masking.replacedByRandom),
      },
      randomNext: sum((r) => r.instances.randomNext),
      forcedRandomNext: sum((r) => r.instances.forcedRandomNext),
    };
  } finally {
    pool?.close();
    await lock?.release();
  }
}

/** A run's own folder inside the output, `.partial-<pid>`. */
const STAGING = ".partial-";

/** Creates the output folder; returns the folders it created, deepest first. */
async function makeOutputDir(dir: string): Promise<string[]> {
  const created: string[] = [];
  for (let d = resolve(dir); !(await Deno.lstat(d).then(() => true, () => false)); d = dirname(d)) {
    created.push(d);
  }
  try {
    await Deno.mkdir(dir, { recursive: true });
  } catch (e) {
    throw new DataError(`output ${dir}: ${(e as Error).message}`);
  }
  return created;
}

/**
 * Moves a complete run from `staging` into `dir` once nothing is in the way: the old manifest goes first (the
 * folder never looks complete with a mix of shards), then old shards and temporaries (other files stay).
 */
async function swapIn(staging: string, dir: string, manifest: Manifest): Promise<void> {
  const files = [...manifest.shards.map((x) => x.file), MANIFEST_NAME];
  const found = await Promise.all(files.map((f) => Deno.lstat(join(dir, f)).catch(() => undefined)));
  const f = files[found.findIndex((st) => st && !st.isFile)];
  if (f) throw new DataError(`cannot write ${join(dir, f)}: something not a file is in the way`);
  await Deno.remove(join(dir, MANIFEST_NAME)).catch(() => {}); // absent, or the rename below fails
  for await (const entry of Deno.readDir(dir)) {
    const ours = /^shard-\d+\.bin$/.test(entry.name) || isTempName(entry.name);
    if (ours && entry.isFile) await Deno.remove(join(dir, entry.name));
  }
  for (const f of files) await Deno.rename(join(staging, f), join(dir, f));
  await Deno.remove(staging);
}

async function finish(
  dir: string,
  s: PrepareSettings,
  tok: Awaited<ReturnType<typeof tokenizerFor>>,
  spec: TokenizerSpec,
  sources: string[],
  corpus: TokenCorpus,
  results: ShardResult[],
): Promise<Manifest> {
  results.sort((a, b) => a.index - b.index);
  const layout = recordLayout(s.maxSeqLength, s.maxPredictionsPerSeq, tok.vocabSize);
  const manifest: Manifest = {
    format: MANIFEST_FORMAT,
    version: 1,
    generator: GENERATOR,
    max_seq_length: s.maxSeqLength,
    max_predictions_per_seq: s.maxPredictionsPerSeq,
    vocab_size: tok.vocabSize,
    record_size: layout.recordSize,
    records: results.reduce((n, r) => n + r.records, 0),
    tokens: results.reduce((n, r) => n + r.instances.tokens, 0),
    shards: results.map((r) => ({
      file: r.file,
      records: r.records,
      tokens: r.instances.tokens,
      bytes: r.bytes,
      crc32: crcHex(r.crc32),
    })),
    settings: manifestSettings(s),
    tokenizer: {
      source: spec.vocab ?? "built-in bert-base-uncased",
      vocab_size: tok.vocabSize,
      lower_case: tok.lowerCase,
      vocab_sha256: await vocabHash(tok),
    },
    input: {
      sources,
      documents: numDocuments(corpus),
      sentences: numSentences(corpus),
      tokens: numTokens(corpus),
    },
  };
  await io(join(dir, MANIFEST_NAME), "write", () => writeManifest(dir, manifest));
  return manifest;
}
