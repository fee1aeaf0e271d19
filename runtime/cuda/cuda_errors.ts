/**
 * Errors of the CUDA runtime. A failed driver, NVRTC or cuBLASLt call names the call, the status by name
 * and, where there is one, the kernel: with hundreds of kernels per step, "CUDA_ERROR_ILLEGAL_ADDRESS" alone
 * says nothing about where to look.
 */

export class CudaError extends Error {
  override name = "CudaError";
}

/**
 * No usable CUDA: a library is missing, or the driver is there but finds no GPU. `searched` lists the
 * places that were looked at, so the message can say where the library was expected.
 */
export class CudaUnavailableError extends CudaError {
  override name = "CudaUnavailableError";
  constructor(message: string, readonly searched: readonly string[] = []) {
    super(message);
  }
}
