/**
 * Finding the CUDA shared libraries: the driver (libcuda.so.1), NVRTC (libnvrtc.so.N) and cuBLASLt
 * (libcublasLt.so.N). They live in different places on different machines: the toolkit under
 * /usr/local/cuda*, a container's driver mount (/usr/local/nvidia), Python wheels (site-packages/nvidia/
 * <pkg>/lib, where PyTorch's CUDA comes from), the distribution's library folder, or anywhere
 * LD_LIBRARY_PATH says. Discovery only looks at file names (nothing is loaded here), so it is safe and
 * testable on a machine without a GPU; the folders searched are kept for the error message.
 */

import { CudaUnavailableError } from "./cuda_errors.ts";

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

function defaultEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined; // no --allow-env: discovery still works from the fixed folders
  }
}

/** The names in `dir`, or none when it cannot be read. */
export function listDir(dir: string): string[] {
  try {
    return [...Deno.readDirSync(dir)].map((e) => e.name);
  } catch {
    return [];
  }
}

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile; // follows symlinks: a dangling link does not count
  } catch {
    return false;
  }
}

/** Folders matching `parent/<name matching re>`, newest version first (cuda-13.0 before cuda-12.4). */
function subdirs(parent: string, re: RegExp): string[] {
  return listDir(parent).filter((n) => re.test(n)).sort(byVersionDesc).map((n) => `${parent}/${n}`);
}

/** Numeric parts of a name, compared left to right; more parts (a full soname) after fewer on a tie. */
function versionOf(name: string): number[] {
  return (name.match(/\d+/g) ?? []).map(Number);
}

/** Newest version first, by the numeric parts of two names (`versionOf`); then by name. */
export function byVersionDesc(a: string, b: string): number {
  const va = versionOf(a), vb = versionOf(b);
  for (let i = 0; i < Math.max(va.length, vb.length); i++) {
    const d = (vb[i] ?? -1) - (va[i] ?? -1);
    if (d !== 0) return d;
  }
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Within one folder: the soname-like file with the highest major version; libfoo.so.13 before
 * libfoo.so.13.0.88 (the loader's usual name; they are normally links to one file), and the bare .so last.
 */
function rank(names: readonly string[]): string[] {
  return [...names].sort((a, b) => {
    const va = versionOf(a.replace(/^lib[A-Za-z]+/, "")), vb = versionOf(b.replace(/^lib[A-Za-z]+/, ""));
    if (va.length === 0 || vb.length === 0) return vb.length - va.length;
    if (va[0] !== vb[0]) return vb[0] - va[0];
    return va.length - vb.length;
  });
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

/** Folders named in /etc/ld.so.conf and the files it includes (what ldconfig would search). */
function ldSoConfDirs(): string[] {
  const out: string[] = [];
  const seen = new Set<string>();
  const read = (file: string, depth: number) => {
    if (depth > 4 || seen.has(file)) return;
    seen.add(file);
    let text: string;
    try {
      text = Deno.readTextFileSync(file);
    } catch {
      return;
    }
    for (const raw of text.split("\n")) {
      const line = raw.replace(/#.*/, "").trim();
      if (!line) continue;
      const inc = line.match(/^include\s+(.+)$/);
      if (inc) {
        for (const pattern of inc[1].split(/\s+/)) {
          const slash = pattern.lastIndexOf("/");
          const dir = pattern.slice(0, slash), glob = pattern.slice(slash + 1);
          const re = new RegExp(`^${glob.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*")}$`);
          for (const f of listDir(dir).filter((n) => re.test(n)).sort()) read(`${dir}/${f}`, depth + 1);
        }
      } else if (line.startsWith("/")) out.push(line);
    }
  };
  read("/etc/ld.so.conf", 0);
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
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
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
  for (const dir of searched) {
    for (const name of rank(listDir(dir).filter((n) => spec.file.test(n)))) {
      const path = `${dir}/${name}`;
      if (isFile(path)) return { library, label: spec.label, path, sonames: spec.soname, searched };
    }
  }
  return { library, label: spec.label, path: null, sonames: spec.soname, searched };
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
