/**
 * Finding the CUDA shared libraries: the driver (libcuda.so.1), NVRTC (libnvrtc.so.N) and cuBLASLt
 * (libcublasLt.so.N). They live in different places on different machines: the toolkit under
 * /usr/local/cuda*, a container's driver mount (/usr/local/nvidia), Python wheels (site-packages/nvidia/
 * <pkg>/lib, where PyTorch's CUDA comes from), the distribution's library folder, or anywhere
 * LD_LIBRARY_PATH says. Discovery only looks at file names (nothing is loaded here), so it is safe and
 * testable on a machine without a GPU; the folders searched are kept for the error message.
 */

import { CudaUnavailableError } from "./cuda_errors.ts";
import { env as defaultEnv } from "../code_cache.ts";
import { firstMatch, ldSoConfDirs, listDir, subdirs, SYSTEM_LIB_DIRS } from "../library_finder.ts";

export type CudaLibraryName = "cuda" | "nvrtc" | "cublasLt";

interface LibrarySpec {
  /** What the error message calls it. */
  readonly label: string;
  /** File names that count, best first within a folder (see `rank`). */
  readonly file: RegExp;
  /** The soname to hand the system loader when no folder has the file (it may know more folders). */
  readonly soname: readonly string[];
}

const SPECS: Record<CudaLibraryName, LibrarySpec> = {
  // The driver's soname is fixed at .so.1; libcuda.so (unversioned) is a dev symlink and may be a stub
  // (toolkit's lib64/stubs, which is never searched here because a stub fails every call).
  cuda: { label: "libcuda.so.1 (the NVIDIA driver)", file: /^libcuda\.so(\.1)?$/, soname: ["libcuda.so.1"] },
  nvrtc: {
    label: "libnvrtc.so (NVRTC)",
    file: /^libnvrtc\.so(\.\d+)*$/,
    soname: ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
  },
  cublasLt: {
    label: "libcublasLt.so (cuBLASLt)",
    file: /^libcublasLt\.so(\.\d+)*$/,
    soname: ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"],
  },
};

export interface Discovery {
  readonly library: CudaLibraryName;
  readonly label: string;
  /** Absolute path of the best file found, or null. */
  readonly path: string | null;
  /** Sonames to try with the system loader when `path` is null (or fails to load). */
  readonly sonames: readonly string[];
  /** Folders looked at, in order (for error messages). */
  readonly searched: readonly string[];
}

export interface DiscoverOptions {
  /** Environment lookup (tests pass their own). Default: Deno.env.get, or nothing without --allow-env. */
  readonly env?: (name: string) => string | undefined;
  /** Extra site-packages folders, searched for nvidia/<pkg>/lib before the ones found by listing. */
  readonly sitePackages?: readonly string[];
  /** Replaces the built-in system folders (tests use this to keep the real machine out). */
  readonly systemDirs?: readonly string[];
}

/** The python3 site-packages folders that can be found by listing directories (no python run). */
export function knownSitePackages(env: (name: string) => string | undefined = defaultEnv): string[] {
  const out: string[] = [];
  const pyDirs = (lib: string) => subdirs(lib, /^python3(\.\d+)?$/);
  const roots: string[] = [];
  for (const v of ["VIRTUAL_ENV", "CONDA_PREFIX"]) {
    const p = env(v);
    if (p) roots.push(p);
  }
  // Virtual environments under /opt (the GPU image keeps PyTorch's in /opt/torch/.venv).
  for (const d of listDir("/opt")) roots.push(`/opt/${d}/.venv`, `/opt/${d}`);
  const home = env("HOME");
  if (home) roots.push(`${home}/.local`);
  roots.push("/usr/local", "/usr");
  for (const root of roots) {
    for (const py of pyDirs(`${root}/lib`)) out.push(`${py}/site-packages`, `${py}/dist-packages`);
  }
  out.push("/usr/lib/python3/dist-packages");
  return out.filter((d) => listDir(d).length > 0);
}

/** nvidia/<pkg>/lib folders of Python wheels (nvidia-cuda-nvrtc, nvidia-cublas, and CUDA 13's nvidia/cu13). */
function wheelLibDirs(sitePackages: readonly string[]): string[] {
  const out: string[] = [];
  for (const sp of sitePackages) {
    for (const pkg of listDir(`${sp}/nvidia`).sort()) {
      out.push(`${sp}/nvidia/${pkg}/lib`, `${sp}/nvidia/${pkg}/lib64`);
    }
  }
  return out;
}

/** The system folders, in search order, after LD_LIBRARY_PATH and $CUDA_HOME/$CUDA_PATH. */
function systemDirs(env: (name: string) => string | undefined, sitePackages: readonly string[]): string[] {
  const toolkits = ["/usr/local/cuda", ...subdirs("/usr/local", /^cuda-\d+(\.\d+)*$/)];
  return [
    // A container's driver mount comes before the toolkit: the toolkit has only a stub libcuda.
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    ...toolkits.flatMap((t) => [`${t}/lib64`, `${t}/lib`, `${t}/targets/x86_64-linux/lib`]),
    ...wheelLibDirs([...sitePackages, ...knownSitePackages(env)]),
    ...SYSTEM_LIB_DIRS,
    "/usr/lib/wsl/lib",
    ...ldSoConfDirs(),
  ];
}

/** Every folder to search, in order, without repeats. */
export function searchDirs(opts: DiscoverOptions = {}): string[] {
  const env = opts.env ?? defaultEnv;
  const dirs: string[] = [];
  for (const p of (env("LD_LIBRARY_PATH") ?? "").split(":")) if (p) dirs.push(p);
  for (const v of ["CUDA_HOME", "CUDA_PATH"]) {
    const root = env(v);
    if (root) dirs.push(`${root}/lib64`, `${root}/lib`, `${root}/targets/x86_64-linux/lib`);
  }
  dirs.push(...(opts.systemDirs ?? systemDirs(env, opts.sitePackages ?? [])));
  const seen = new Set<string>();
  return dirs.map((d) => d.replace(/\/+$/, "") || "/").filter((d) => !seen.has(d) && seen.add(d));
}

/** Finds one library: the first folder (in search order) holding a matching file wins. */
export function discover(library: CudaLibraryName, opts: DiscoverOptions = {}): Discovery {
  const spec = SPECS[library];
  const searched = searchDirs(opts);
  return {
    library,
    label: spec.label,
    path: firstMatch(searched, spec.file),
    sonames: spec.soname,
    searched,
  };
}

/** The error text for a library that is nowhere: what was looked for and every folder searched. */
export function notFoundMessage(d: Discovery, why?: string): string {
  const shown = d.searched.length > 12
    ? `${d.searched.slice(0, 12).join(", ")} and ${d.searched.length - 12} more`
    : d.searched.join(", ");
  return `${d.label} not found${why ? ` (${why})` : ""}; searched LD_LIBRARY_PATH, $CUDA_HOME/$CUDA_PATH, ` +
    `the CUDA toolkit, Python wheels and system folders: ${shown || "(no folders)"}; ` +
    `the system loader also failed for ${d.sonames.join(", ")}`;
}

/** Whether this process may load native libraries (deno run --allow-ffi). */
export function ffiAllowed(): boolean {
  try {
    return Deno.permissions.querySync({ name: "ffi" }).state === "granted";
  } catch {
    return false;
  }
}

/**
 * Loads a discovered library: its path first, then each soname through the system loader. Throws
 * CudaUnavailableError naming the library, the folders searched and each loader failure.
 */
export function openDiscovered<S extends Deno.ForeignLibraryInterface>(
  d: Discovery,
  symbols: S,
): { lib: Deno.DynamicLibrary<S>; path: string } {
  if (!ffiAllowed()) {
    throw new CudaUnavailableError(
      `loading ${d.label} needs the FFI permission (deno run --allow-ffi)`,
      d.searched,
    );
  }
  const failures: string[] = [];
  for (const path of [...(d.path ? [d.path] : []), ...d.sonames]) {
    try {
      return { lib: Deno.dlopen(path, symbols), path };
    } catch (e) {
      failures.push(`${path}: ${e instanceof Error ? e.message.split("\n")[0] : e}`);
    }
  }
  const why = d.path ? `found ${d.path} but it did not load: ${failures[0]}` : undefined;
  throw new CudaUnavailableError(notFoundMessage(d, why), d.searched);
}
