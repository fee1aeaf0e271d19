/** A user mistake in a fine-tuning data file: the message names the file (and line where there is one). */
export class DatasetError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DatasetError";
  }
}

/** Reads a UTF-8 text file; a missing or unreadable file is a DatasetError naming it. */
export async function readDataFile(path: string, what: string): Promise<string> {
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) throw new DatasetError(`${what} file not found: ${path}`);
    if (e instanceof Deno.errors.IsADirectory) throw new DatasetError(`${what} file ${path} is a directory`);
    throw new DatasetError(`cannot read ${what} file ${path}: ${(e as Error).message}`);
  }
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    return text.startsWith("\uFEFF") ? text.slice(1) : text;
  } catch {
    throw new DatasetError(`${path}: not UTF-8 text`);
  }
}
