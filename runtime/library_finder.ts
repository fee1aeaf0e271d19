/**
 * Finding shared libraries by file name (nothing is loaded here, so it is safe and testable anywhere): the
 * folders a loader would search, each folder's best-versioned match. The CUDA libraries (runtime/cuda/
 * libs.ts) and OpenBLAS (runtime/cpu/blas.ts) are found through it, each adding its own folders.
 */

/** The distribution's library folders, after LD_LIBRARY_PATH and a library's own places. */
export const SYSTEM_LIB_DIRS: readonly string[] = [
  "/usr/lib/x86_64-linux-gnu",
  "/lib/x86_64-linux-gnu",
  "/usr/lib/aarch64-linux-gnu",
  "/usr/lib64",
];

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
export function subdirs(parent: string, re: RegExp): string[] {
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

/** Folders named in /etc/ld.so.conf and the files it includes (what ldconfig would search). */
export function ldSoConfDirs(): string[] {
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

/** The first file in `dirs` (in order; within a folder, `rank`'s best) whose name matches `file`. */
export function firstMatch(dirs: readonly string[], file: RegExp): string | null {
  for (const dir of dirs) {
    for (const name of rank(listDir(dir).filter((n) => file.test(n)))) {
      if (isFile(`${dir}/${name}`)) return `${dir}/${name}`;
    }
  }
  return null;
}
