/**
 * Problems a user causes in the data pipeline (missing or empty input, bad settings, corrupt shards).
 * Commands print these as one line and exit 1; anything else is a bug.
 */
export class DataError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DataError";
  }
}

/** A shard file that cannot be read: the message names the file and, where it applies, the byte offset. */
export class ShardError extends DataError {
  readonly file: string;
  readonly offset: number | undefined;
  constructor(file: string, problem: string, offset?: number) {
    super(`shard ${file}: ${problem}${offset === undefined ? "" : ` (at byte offset ${offset})`}`);
    this.name = "ShardError";
    this.file = file;
    this.offset = offset;
  }
}
