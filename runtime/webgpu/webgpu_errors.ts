/**
 * Errors of the WebGPU runtime. Every message names what it is about (kernel, tensor, buffer), because a
 * bare "validation error" from a plan with hundreds of kernels is no help.
 */

export class WebGPUError extends Error {
  override name = "WebGPUError";
}

/** Runs `f` inside a validation error scope; a captured error is rethrown with `what` in front. */
export async function validated<T>(device: GPUDevice, what: string, f: () => T): Promise<T> {
  device.pushErrorScope("validation");
  let value: T;
  try {
    value = f();
  } catch (e) {
    await device.popErrorScope();
    throw new WebGPUError(`${what}: ${errorText(e)}`);
  }
  const err = await device.popErrorScope();
  if (err) throw new WebGPUError(`${what}: ${tidy(err.message)}`);
  return value;
}

/** The message of any thrown value. */
export function errorText(e: unknown): string {
  return e instanceof Error ? tidy(e.message) : String(e);
}

/** wgpu messages come with blank lines and trailing whitespace; keep them compact but complete. */
export function tidy(message: string): string {
  return message.split("\n").map((l) => l.trimEnd()).filter((l) => l.trim() !== "").join("\n").trim();
}
