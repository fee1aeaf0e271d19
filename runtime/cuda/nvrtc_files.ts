/**
 * The files NVRTC needs besides libnvrtc itself, and what of them goes into the kernel cache key:
 * libnvrtc-builtins (loaded first from libnvrtc's folder, which no loader path names in a Python wheel),
 * the CUDA headers (on the include path, of NVRTC's major version where there is a choice), and a cache key
 * that depends on the headers' contents, not their folder (DESIGN.md, notes: runtime/cuda/nvrtc_files.ts).
 */
import { createHash } from "node:crypto";
import { byVersionDesc, listDir } from "../library_finder.ts";

/** What a kernel includes (compiler/codegen/cuda.ts) and their own version-bearing includes. */
export const KEY_HEADERS = [
  "cuda_fp16.h",
  "cuda_fp16.hpp",
  "cuda_bf16.h",
  "cuda_bf16.hpp",
  "vector_types.h",
  "vector_functions.h",
  "vector_functions.hpp",
  "cuda.h",
] as const;

function readText(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path);
  } catch {
    return undefined;
  }
}

const dirOf = (path: string) => (path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "");

/**
 * libnvrtc-builtins files in the folder of `nvrtcPath`, best first: the one named for NVRTC's own
 * major.minor (`libnvrtc-builtins.so.13.0`), then any other (highest version first).
 */
export function builtinsBeside(nvrtcPath: string, version: readonly [number, number]): string[] {
  const dir = dirOf(nvrtcPath);
  if (!dir) return [];
  const names = listDir(dir).filter((n) => /^libnvrtc-builtins\.so(\.\d+)*$/.test(n));
  const exact = `libnvrtc-builtins.so.${version[0]}.${version[1]}`;
  names.sort((a, b) => ((a === exact) !== (b === exact) ? (a === exact ? -1 : 1) : byVersionDesc(a, b)));
  return names.map((n) => `${dir}/${n}`);
}

/**
 * Loads the builtins library beside libnvrtc (no symbols bound: only its presence in the process
 * matters). Returns the handle to close with NVRTC, or null when there is none or it does not load (a
 * system-installed NVRTC finds its builtins through the loader anyway; a failure then shows at compile).
 */
export function preloadBuiltins(
  nvrtcPath: string,
  version: readonly [number, number],
): Deno.DynamicLibrary<Record<string, never>> | null {
  for (const path of builtinsBeside(nvrtcPath, version)) {
    try {
      return Deno.dlopen(path, {});
    } catch {
      // the next candidate
    }
  }
  return null;
}

/** CUDA_VERSION of the headers in `dir` (from cuda.h or cuda_runtime_api.h), e.g. 13000; 0 if unknown. */
export function headerCudaVersion(dir: string): number {
  for (const f of ["cuda.h", "cuda_runtime_api.h"]) {
    const m = readText(`${dir}/${f}`)?.match(/#define\s+(?:CUDA_VERSION|CUDART_VERSION)\s+(\d+)/);
    if (m) return Number(m[1]);
  }
  return 0;
}

export interface HeaderSearch {
  readonly env: (name: string) => string | undefined;
  /** Roots holding include/ folders to try after the library's own (default /usr/local/cuda*). */
  readonly toolkits?: readonly string[];
}

/**
 * The include folders for NVRTC at `nvrtcPath` (version `version`): one folder with cuda_fp16.h, and its
 * cccl/ subfolder when it has one (CUDA 13 moved <nv/target> and the other CCCL headers there; nvcc adds
 * it by itself, NVRTC does not). Candidates, in order: beside the library (lib/../include), the other
 * packages of a wheel (site-packages/nvidia/*\/include: CUDA 12 wheels keep cuda_fp16.h in
 * nvidia/cuda_runtime), $CUDA_HOME, $CUDA_PATH, the toolkits. The first candidate whose CUDA_VERSION has
 * NVRTC's major version wins; without one, the first that is not newer than NVRTC; else none.
 */
export function includeDirsFor(
  nvrtcPath: string,
  version: readonly [number, number],
  search: HeaderSearch,
): string[] {
  const dir = dirOf(nvrtcPath);
  const candidates: string[] = [];
  if (dir) {
    candidates.push(`${dir}/../include`, `${dir}/../../include`);
    const nvidia = dir.match(/^(.*\/nvidia)\/[^/]+\/lib(64)?$/);
    if (nvidia) {
      for (const pkg of listDir(nvidia[1]).sort()) candidates.push(`${nvidia[1]}/${pkg}/include`);
    }
  }
  for (const v of ["CUDA_HOME", "CUDA_PATH"]) {
    const root = search.env(v);
    if (root) candidates.push(`${root}/include`);
  }
  const toolkits = search.toolkits ?? [
    `/usr/local/cuda-${version[0]}.${version[1]}`,
    "/usr/local/cuda",
    ...listDir("/usr/local").filter((n) => /^cuda-\d+(\.\d+)*$/.test(n)).sort().reverse().map((n) =>
      `/usr/local/${n}`
    ),
  ];
  candidates.push(...toolkits.map((t) => `${t}/include`));
  const found: string[] = [];
  for (const c of candidates) {
    try {
      const real = Deno.realPathSync(c);
      if (Deno.statSync(`${real}/cuda_fp16.h`).isFile && !found.includes(real)) found.push(real);
    } catch {
      // not there
    }
  }
  // Headers newer than NVRTC use what only a newer NVRTC provides (CUDA 13's cuda_fp16.h expects
  // <nv/target> built in, which NVRTC 11 lacks): never pass those; with none suitable, NVRTC's own.
  const ver = (d: string) => headerCudaVersion(d);
  const nvrtcVer = version[0] * 1000 + version[1] * 10;
  const best = found.find((d) => Math.floor(ver(d) / 1000) === version[0]) ??
    found.find((d) => ver(d) !== 0 && ver(d) <= nvrtcVer);
  if (!best) return [];
  const cccl = `${best}/cccl`;
  try {
    if (Deno.statSync(cccl).isDirectory) return [best, cccl];
  } catch {
    // no cccl/ (CUDA 12 and older)
  }
  return [best];
}

/**
 * What the include folders contribute to a compile, independent of where they are: a SHA-256 over the
 * names and contents of KEY_HEADERS in each folder (a missing file counts as missing), in -I order.
 */
export function headerIdentity(dirs: readonly string[]): string {
  const h = createHash("sha256");
  dirs.forEach((d, i) => {
    h.update(`dir ${i}\n`);
    for (const f of KEY_HEADERS) {
      let bytes: Uint8Array | undefined;
      try {
        bytes = Deno.readFileSync(`${d}/${f}`);
      } catch {
        bytes = undefined;
      }
      h.update(bytes ? `${f} ${bytes.length}\n` : `${f} absent\n`);
      if (bytes) h.update(bytes);
    }
  });
  return h.digest("hex");
}

/** The compile options as the cache key sees them: each -I<folder> replaced by its headers' identity. */
export function keyOptions(options: readonly string[]): string[] {
  return options.map((o) => (o.startsWith("-I") ? `-I<headers ${headerIdentity([o.slice(2)])}>` : o));
}
