/** A user mistake: an unreadable or invalid vocabulary, impossible encode options. */
export class TokenizerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TokenizerError";
  }
}
