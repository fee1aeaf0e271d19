/** A malformed graph or an op applied to operands it does not accept. */
export class IRError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "IRError";
  }
}
