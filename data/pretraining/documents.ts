/**
 * Pretraining input: text in BERT's format (one sentence per line, a blank line between documents) read
 * from files and tokenized into one flat array of ids with sentence and document boundaries. Sentences of
 * a document are adjacent in the array, so any run of consecutive sentences is one contiguous range;
 * instance creation works on ranges and never copies token lists.
 */
import { join } from "node:path";
import { DataError } from "../shards/errors.ts";
import { MAX_TEXT_BYTES, readBounded, STDIN } from "../read_bounded.ts";

/** The tokenized corpus. Sentence k is ids[sentenceStarts[k] .. sentenceStarts[k+1]); document d is
 * sentences docStarts[d] .. docStarts[d+1]. Every document has at least one sentence, every sentence at
 * least one token. */
export interface TokenCorpus {
  ids: Int32Array;
  sentenceStarts: Uint32Array;
  docStarts: Uint32Array;
}

/** What tokenizing one piece of text gives before pieces are joined. */
export interface TokenizedChunk {
  ids: Int32Array;
  sentenceLengths: Uint32Array;
  /** Sentences per document, in order; documents whose lines all tokenized to nothing are left out. */
  docSentenceCounts: Uint32Array;
}

export interface WordPieceLike {
  tokenize(text: string): { ids: number[] };
}

export const numDocuments = (c: TokenCorpus) => c.docStarts.length - 1;
export const numSentences = (c: TokenCorpus) => c.sentenceStarts.length - 1;
export const numTokens = (c: TokenCorpus) => c.ids.length;

/** Tokens of document d (a count, from the sentence table). */
export function documentTokens(c: TokenCorpus, d: number): number {
  return c.sentenceStarts[c.docStarts[d + 1]] - c.sentenceStarts[c.docStarts[d]];
}

/** A growable Int32Array/Uint32Array, because number[] of a million ids is several times larger. */
class IntList {
  length = 0;
  constructor(private data: Int32Array | Uint32Array) {}
  push(x: number): void {
    if (this.length === this.data.length) {
      const grown = new (this.data.constructor as Int32ArrayConstructor)(this.data.length * 2);
      grown.set(this.data);
      this.data = grown;
    }
    this.data[this.length++] = x;
  }
  pushAll(xs: number[]): void {
    for (const x of xs) this.push(x);
  }
  done(): Int32Array | Uint32Array {
    return this.data.slice(0, this.length);
  }
}

/** Tokenizes text in BERT's input format. Lines are trimmed; whitespace-only lines separate documents. */
export function tokenizeChunk(tok: WordPieceLike, text: string): TokenizedChunk {
  const ids = new IntList(new Int32Array(1 << 16));
  const sentenceLengths = new IntList(new Uint32Array(1 << 12));
  const docSentenceCounts = new IntList(new Uint32Array(1 << 8));
  let inDoc = 0;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "") {
      if (inDoc > 0) docSentenceCounts.push(inDoc);
      inDoc = 0;
      continue;
    }
    const t = tok.tokenize(line).ids;
    if (t.length === 0) continue; // e.g. a line of control characters: no sentence at all
    ids.pushAll(t);
    sentenceLengths.push(t.length);
    inDoc++;
  }
  if (inDoc > 0) docSentenceCounts.push(inDoc);
  return {
    ids: ids.done() as Int32Array,
    sentenceLengths: sentenceLengths.done() as Uint32Array,
    docSentenceCounts: docSentenceCounts.done() as Uint32Array,
  };
}

/**
 * Cuts text into about `n` pieces at blank lines, so no document is split and tokenizing the pieces
 * separately (in workers) gives exactly what tokenizing the whole would.
 */
export function splitAtDocuments(text: string, n: number): string[] {
  const pieces: string[] = [];
  let start = 0;
  const blank = /\n[ \t\r\f\v]*\n/g;
  for (let k = 1; k < n && start < text.length; k++) {
    blank.lastIndex = Math.max(start, Math.floor((text.length * k) / n));
    const m = blank.exec(text);
    if (!m) break;
    const cut = m.index + 1;
    pieces.push(text.slice(start, cut));
    start = cut;
  }
  pieces.push(text.slice(start));
  return pieces;
}

/** Joins tokenized pieces in order; with `shared` the arrays live in SharedArrayBuffers for workers. */
export function joinChunks(chunks: TokenizedChunk[], shared = false): TokenCorpus {
  const total = (key: keyof TokenizedChunk) => chunks.reduce((s, c) => s + c[key].length, 0);
  const alloc = <T extends Int32Array | Uint32Array>(Ctor: { new (b: ArrayBufferLike): T }, n: number): T =>
    new Ctor(shared ? new SharedArrayBuffer(n * 4) : new ArrayBuffer(n * 4));
  const ids = alloc(Int32Array, total("ids"));
  const sentenceStarts = alloc(Uint32Array, total("sentenceLengths") + 1);
  const docStarts = alloc(Uint32Array, total("docSentenceCounts") + 1);
  let t = 0, s = 0, d = 0;
  for (const c of chunks) {
    ids.set(c.ids, t);
    for (const len of c.sentenceLengths) sentenceStarts[++s] = t += len;
    for (const count of c.docSentenceCounts) docStarts[d + 1] = docStarts[d++] + count;
  }
  return { ids, sentenceStarts, docStarts };
}

/**
 * Input files: each path is a file, - (standard input), or a directory whose regular files (sorted, no dot
 * files) are read.
 */
export async function listInputFiles(paths: string[]): Promise<string[]> {
  const files: string[] = [];
  for (const p of paths) {
    const info = STDIN.includes(p) ? undefined : await Deno.stat(p).catch((e) => {
      if (e instanceof Deno.errors.NotFound) throw new DataError(`input ${p}: no such file or directory`);
      throw new DataError(`input ${p}: ${(e as Error).message}`);
    });
    if (info?.isDirectory) {
      const names: string[] = [];
      for await (const entry of Deno.readDir(p)) {
        if (!entry.name.startsWith(".") && (entry.isFile || entry.isSymlink)) names.push(entry.name);
      }
      if (names.length === 0) throw new DataError(`input ${p}: the directory has no files`);
      names.sort();
      files.push(...names.map((n) => join(p, n)));
    } else {
      files.push(p);
    }
  }
  return files;
}

/** Offset in `bytes` of the first byte the UTF-8 decoder replaced (a U+FFFD that the file did not spell). */
function firstInvalidByte(bytes: Uint8Array): number {
  const text = new TextDecoder().decode(bytes), enc = new TextEncoder();
  let at = 0, from = 0;
  for (let i = text.indexOf("\uFFFD"); i >= 0; i = text.indexOf("\uFFFD", i + 1)) {
    at += enc.encode(text.slice(from, i)).length;
    from = i;
    if (bytes[at] !== 0xef || bytes[at + 1] !== 0xbf || bytes[at + 2] !== 0xbd) return at;
  }
  return bytes.length;
}

/** Control characters BERT's tokenizer drops (C0 but tab and line breaks, DEL, C1): none belong in text. */
const isControl = (c: number) => (c < 32 && (c < 9 || c > 13)) || (c >= 0x7f && c <= 0x9f);

/**
 * Refuses text that is not prose: random bytes that happen to decode (7-bit noise is valid UTF-8) are a
 * fifth control characters, text a stray few. A NUL, or over 1% control characters, names the file and
 * the byte offset of the first.
 */
function checkText(f: string, text: string): void {
  let count = 0, first = -1;
  for (let i = 0; i < text.length; i++) {
    if (isControl(text.charCodeAt(i)) && count++ === 0) first = i;
  }
  const nul = text.indexOf("\0");
  if (nul < 0 && count <= text.length / 100) return;
  const at = nul >= 0 ? nul : first, share = (100 * count / text.length).toFixed(0);
  const hex = text.charCodeAt(at).toString(16).padStart(2, "0");
  const why = nul >= 0 ? "a NUL" : `control character 0x${hex}, as are ${share}% of its characters`;
  const byte = new TextEncoder().encode(text.slice(0, at)).length;
  throw new DataError(`input ${f}: byte ${byte} is ${why}; not a text file (prepare-data reads plain text)`);
}

/** The text of `bytes`, refused as not UTF-8 or not prose; `stream`: a first piece, more to follow. */
function textOf(f: string, bytes: Uint8Array, utf8: TextDecoder, stream = false): string {
  let text: string;
  try {
    text = utf8.decode(bytes, { stream });
  } catch {
    const at = firstInvalidByte(bytes), why = "a binary file?); prepare-data reads plain text";
    throw new DataError(`input ${f}: not UTF-8 text (byte ${at}: ${why}`);
  }
  checkText(f, text);
  return text;
}

/** The text of all inputs; a file boundary also ends a document. */
export async function readInputText(files: string[]): Promise<string> {
  const texts: string[] = [];
  // Fatal decoding: a binary file (random bytes, a zip) must be refused, not become a shard of U+FFFD.
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  let budget = MAX_TEXT_BYTES;
  const fail = (m: string) => new DataError(m),
    tooBig = `the inputs pass ${budget >> 20} MiB, the most one run reads`;
  for (const f of files) {
    const first = (piece: Uint8Array) => textOf(f, piece, new TextDecoder("utf-8", { fatal: true }), true);
    const bytes = await readBounded(f, { what: "input", fail, budget, tooBig, first });
    budget -= bytes.length;
    texts.push(textOf(f, bytes, utf8));
  }
  return texts.join("\n\n");
}
