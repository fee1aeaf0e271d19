/**
 * Which backend runs a command: the one asked for, or with `auto` the fastest one present — CUDA when
 * the driver loads and sees a GPU, else WebGPU when navigator.gpu gives an adapter, else the reference
 * interpreter. One module so that `infer` and `train` choose alike; the choice and the reasons the faster
 * backends were passed over come back as one line for stderr.
 */
import { type CudaContext, openCuda } from "../runtime/cuda/context.ts";
import { CudaUnavailableError } from "../runtime/cuda/errors.ts";
import { type GpuContext, openWebGPU } from "../runtime/webgpu/device.ts";
import { WebGPUBackendError } from "./webgpu_backend.ts";

/** `--backend cuda` cannot run here; the message is one line naming what is missing. */
export class CudaBackendError extends Error {
  override name = "CudaBackendError";
}

export const BACKEND_NAMES = ["auto", "reference", "webgpu", "cuda"] as const;
export type BackendRequest = (typeof BACKEND_NAMES)[number];

export type BackendChoice =
  | { readonly kind: "cuda"; readonly cuda: CudaContext; readonly why: string }
  | { readonly kind: "webgpu"; readonly gpu: GpuContext; readonly why: string }
  | { readonly kind: "reference"; readonly why: string };

/** The probes, replaceable in tests. Each returns a context or the reason there is none. */
export interface Probes {
  readonly cuda: () => CudaContext | { unavailable: string };
  readonly webgpu: () => Promise<GpuContext | { unavailable: string }>;
}

/** The first clause of a long "not found" message: what is missing, without the list of folders. */
function brief(message: string): string {
  const cut = message.indexOf("; searched");
  return cut > 0 ? message.slice(0, cut) : message;
}

export const DEFAULT_PROBES: Probes = {
  cuda: () => {
    try {
      return openCuda();
    } catch (e) {
      if (e instanceof CudaUnavailableError) return { unavailable: e.message };
      throw e;
    }
  },
  webgpu: () => openWebGPU(),
};

/**
 * Opens the requested backend. An explicit `cuda` or `webgpu` that cannot run throws its backend's
 * one-line error (CudaBackendError, WebGPUBackendError); `auto` falls through to the next one.
 */
export async function chooseBackend(
  request: BackendRequest,
  probes: Probes = DEFAULT_PROBES,
): Promise<BackendChoice> {
  switch (request) {
    case "reference":
      return { kind: "reference", why: "asked for" };
    case "cuda": {
      const cuda = probes.cuda();
      if ("unavailable" in cuda) throw new CudaBackendError(`--backend cuda: ${cuda.unavailable}`);
      return { kind: "cuda", cuda, why: `asked for; ${cuda.description}` };
    }
    case "webgpu": {
      const gpu = await probes.webgpu();
      if ("unavailable" in gpu) throw new WebGPUBackendError(`--backend webgpu: ${gpu.unavailable}`);
      return { kind: "webgpu", gpu, why: `asked for; adapter '${gpu.description}'` };
    }
    case "auto": {
      const cuda = probes.cuda();
      if (!("unavailable" in cuda)) return { kind: "cuda", cuda, why: `auto: ${cuda.description}` };
      const noCuda = `no CUDA (${brief(cuda.unavailable)})`;
      const gpu = await probes.webgpu();
      if (!("unavailable" in gpu)) {
        return { kind: "webgpu", gpu, why: `auto: ${noCuda}; WebGPU adapter '${gpu.description}'` };
      }
      return { kind: "reference", why: `auto: ${noCuda}; no WebGPU (${gpu.unavailable})` };
    }
  }
}

/** The stderr line: "backend: reference (auto: no CUDA (...); no WebGPU (...))". */
export function describeChoice(c: BackendChoice): string {
  return `backend: ${c.kind} (${c.why})`;
}
