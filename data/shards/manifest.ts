/**
 * manifest.json of a shard directory. It is written last, after every shard is in place, so its presence
 * means the directory is complete; it names the shards with their counts and checksums and records
 * everything that determined their contents (settings, seed, tokenizer) so a cache can be reused safely.
 */
import { join } from "node:path";
import { DataError } from "./errors.ts";
import { writeFileAtomic } from "./writer.ts";

export const MANIFEST_NAME = "manifest.json";
export const MANIFEST_FORMAT = "bertfuse-pretraining-shards";

export interface ShardEntry {
  file: string;
  records: number;
  /** Sum of num_tokens over the records. */
  tokens: number;
  bytes: number;
  crc32: string;
}

export interface InstanceSettingsRecord {
  max_seq_length: number;
  max_predictions_per_seq: number;
  masked_lm_prob: number;
  dupe_factor: number;
  short_seq_prob: number;
  whole_word_mask: boolean;
  seed: number;
  shard_tokens: number;
}

export interface Manifest {
  format: typeof MANIFEST_FORMAT;
  version: 1;
  /** Bumped when the instance algorithm changes, so caches made by an older one are rebuilt. */
  generator: string;
  max_seq_length: number;
  max_predictions_per_seq: number;
  vocab_size: number;
  record_size: number;
  records: number;
  tokens: number;
  shards: ShardEntry[];
  settings: InstanceSettingsRecord;
  tokenizer: { source: string; vocab_size: number; lower_case: boolean; vocab_sha256: string };
  input: { sources: string[]; documents: number; sentences: number; tokens: number };
}

export async function writeManifest(dir: string, m: Manifest): Promise<void> {
  const text = JSON.stringify(m, null, 2) + "\n";
  await writeFileAtomic(join(dir, MANIFEST_NAME), [new TextEncoder().encode(text)]);
}

/** Reads and shape-checks a manifest; a missing or malformed one is a DataError naming the path. */
export async function readManifest(dir: string): Promise<Manifest> {
  const path = join(dir, MANIFEST_NAME);
  let text: string;
  // Asked first: reading under a device (/dev/zero/manifest.json) fails with a permission error, not NotFound.
  const info = await Deno.stat(dir).catch(() => undefined);
  const missing = (what: string) =>
    new DataError(`${dir} ${what} ${MANIFEST_NAME} (make shards with deno task prepare-data)`);
  if (!info?.isDirectory) throw missing(info ? "is not a directory, no" : "does not exist, no");
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    throw e instanceof Deno.errors.NotFound
      ? missing("has no")
      : new DataError(`${path}: ${(e as Error).message}`);
  }
  let m: Manifest;
  try {
    m = JSON.parse(text);
  } catch (e) {
    throw new DataError(`${path}: not valid JSON (${(e as Error).message})`);
  }
  const bad = (what: string): never => {
    throw new DataError(`${path}: ${what}`);
  };
  if (m?.format !== MANIFEST_FORMAT) bad(`not a shard manifest (format is not '${MANIFEST_FORMAT}')`);
  if (m.version !== 1) bad(`manifest version ${m.version} is not supported`);
  if (!Array.isArray(m.shards) || m.shards.length === 0) bad("no shards listed");
  for (const [i, s] of m.shards.entries()) {
    if (
      typeof s?.file !== "string" || s.file.includes("/") || s.file.includes("\\") || s.file.startsWith(".")
    ) {
      bad(`shards[${i}].file is not a plain file name`);
    }
    if (!Number.isSafeInteger(s.records) || s.records < 0) bad(`shards[${i}].records is not a count`);
  }
  for (const k of ["max_seq_length", "max_predictions_per_seq", "vocab_size", "records"] as const) {
    if (!Number.isSafeInteger(m[k]) || m[k] < 0) bad(`${k} is not a count`);
  }
  return m;
}
