import { readUtf8 } from "../read_bounded.ts";

/** A user mistake in a fine-tuning data file: the message names the file (and line where there is one). */
export class DatasetError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DatasetError";
  }
}

/** Reads a UTF-8 text file (bounded); a missing, unreadable or endless file is a DatasetError naming it. */
export const readDataFile = (path: string, what: string): Promise<string> =>
  readUtf8(path, { what, fail: (m) => new DatasetError(m) });
