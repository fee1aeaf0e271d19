/**
 * Where a checkpoint's files come from in the browser: a folder the person picked (`<input
 * webkitdirectory>`, a FileList whose paths start with the folder's name) or a folder served beside the
 * page (the built-in tiny checkpoints). Only the files a checkpoint folder holds are looked up, by name.
 */

export interface CheckpointSource {
  /** The folder's name, for messages ("qa", "my-bert"). */
  readonly name: string;
  has(file: string): boolean;
  text(file: string): Promise<string>;
  bytes(file: string): Promise<Uint8Array>;
}

/** The files every checkpoint folder may hold; the index of served folders lists which are there. */
export const CHECKPOINT_FILES = [
  "config.json",
  "model.safetensors",
  "vocab.txt",
  "tokenizer.json",
  "tokenizer_config.json",
] as const;

/** A picked folder: files directly inside it by base name (subfolders are ignored). */
export function sourceFromFiles(files: ArrayLike<File>): CheckpointSource {
  const byName = new Map<string, File>();
  let folder = "checkpoint";
  for (const f of Array.from(files)) {
    const parts = (f.webkitRelativePath || f.name).split("/");
    if (parts.length > 2) continue;
    if (parts.length === 2) folder = parts[0];
    byName.set(parts[parts.length - 1], f);
  }
  const get = (file: string) => {
    const f = byName.get(file);
    if (!f) throw new Error(`${folder}/${file}: not in the chosen folder`);
    return f;
  };
  return {
    name: folder,
    has: (file) => byName.has(file),
    text: (file) => get(file).text(),
    bytes: async (file) => new Uint8Array(await get(file).arrayBuffer()),
  };
}

/** A folder served at `base` (ending in "/") whose present files are `present`. */
export function sourceFromUrl(base: string, name: string, present: readonly string[]): CheckpointSource {
  const fetchOk = async (file: string) => {
    const r = await fetch(new URL(file, base));
    if (!r.ok) throw new Error(`${name}/${file}: HTTP ${r.status}`);
    return r;
  };
  return {
    name,
    has: (file) => present.includes(file),
    text: async (file) => (await fetchOk(file)).text(),
    bytes: async (file) => new Uint8Array(await (await fetchOk(file)).arrayBuffer()),
  };
}
