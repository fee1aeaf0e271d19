/** A mistake in how a command was called (flags, arguments); printed as one line with exit code 1. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}
