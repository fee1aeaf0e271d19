/**
 * CUDA's entries in the disk cache of compiled code (runtime/code_cache.ts, `$BERTFUSE_CACHE/cuda`): NVRTC
 * takes tens to hundreds of milliseconds per kernel and a BERT training plan has hundreds, so CUBINs are
 * kept by SHA-256 of everything that determines the binary.
 */
import { CodeCache, codeCacheDir, hashParts } from "../code_cache.ts";

/** Bumped when the key's composition changes, so old entries are never mistaken for new ones. */
const KEY_VERSION = "bertfuse-cuda-kernel-v1";

export interface CacheKeyParts {
  readonly source: string;
  /** e.g. "sm_90" */
  readonly arch: string;
  /** e.g. "13.0" */
  readonly nvrtcVersion: string;
  readonly options: readonly string[];
}

export const kernelCacheKey = (p: CacheKeyParts): string =>
  hashParts([KEY_VERSION, p.arch, p.nvrtcVersion, String(p.options.length), ...p.options, p.source]);

/** The CUBIN cache in `dir` (default `$BERTFUSE_CACHE/cuda`, else ~/.cache/bertfuse/cuda). */
export class KernelCache extends CodeCache {
  constructor(dir: string = codeCacheDir("cuda")) {
    super(dir, ".cubin");
  }
}
