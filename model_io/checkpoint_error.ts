/** A checkpoint problem; the message names the file and what is wrong (cli/common.ts prints it as one line). */
export class CheckpointError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CheckpointError";
  }
}
