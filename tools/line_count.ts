/**
 * Lines of source per top-level folder, and of the core per scope, against the caps in
 * `tools/line_caps.json` (see DESIGN.md, "Line caps").
 *
 * What is counted: every line of every source file under each top-level folder of the root, recursively
 * (fixtures and generated files included; symbolic links are not followed), where a line is a "\n" or a
 * last line without one, as `wc -l` counts a file that ends in a newline. In the core's folders
 * (`tools/line_scopes.json` "folders": ir, plan, numeric, compiler, runtime, engine) every language of
 * "languages" counts (`.ts`, `.c`, `.h`, `.cu`, `.wgsl`); elsewhere `*.ts` alone. Files at the root
 * itself, hidden folders and `node_modules/` are not counted.
 *
 * Each core file belongs to one scope (shared, cuda, cpu, webgpu): the scope of the first of "rules"
 * ([glob, scope]; `*` stays within a folder, `**` crosses them) that its path matches. The core's total
 * and each scope have caps beside the folders', and the goals of "goals" are printed as information.
 *
 *   deno run --allow-read tools/line_count.ts [--root DIR] [--caps FILE] [--scopes FILE]
 *   deno run --allow-read --allow-write tools/line_count.ts --write-caps   (deno task lines --write-caps)
 *
 * `--root` defaults to the current folder, `--caps` and `--scopes` to ROOT/tools/line_caps.json and
 * ROOT/tools/line_scopes.json. `--write-caps` only lowers caps: each becomes the smaller of itself and
 * today's count plus 5%, rounded up to a multiple of 100 (a folder or scope without a cap gets the
 * latter). Exit code 1 names each folder or scope over its cap, or with lines and no cap; 0 otherwise.
 */
import { parseArgs } from "node:util";

/** The folders in the order they are printed: floors first, then upwards; any other folder follows. */
export const FOLDER_ORDER = [
  "ir",
  "plan",
  "numeric",
  "model_io",
  "dsl",
  "models",
  "compiler",
  "runtime",
  "engine",
  "report",
  "training",
  "data",
  "cli",
  "bench",
  "cases",
  "tools",
  "tests",
  "web",
];

export const HEADROOM = 0.05;

const SKIPPED = new Set(["node_modules"]);

/** The core: its folders, the languages counted in them, the goals and the rules naming each file's scope. */
export interface Scopes {
  folders: string[];
  languages: string[];
  goals: Record<string, number>;
  rules: [string, string][];
}
/** Caps per folder, and of the core: "total" and one per scope. */
export interface Caps {
  folders: Record<string, number>;
  core: Record<string, number>;
}
export interface Counts {
  folders: Map<string, number>;
  core: Map<string, number>;
}

/** Lines of one file's text: the number of "\n", plus one for a last line without it. */
export function linesOf(text: string): number {
  let n = 0;
  for (let i = text.indexOf("\n"); i >= 0; i = text.indexOf("\n", i + 1)) n++;
  if (text.length > 0 && !text.endsWith("\n")) n++;
  return n;
}

/**
 * A path glob as a regular expression: `*` matches within a name, `**` across folders, and `**` followed by
 * a slash any folders or none.
 */
export function globRegex(glob: string): RegExp {
  const body = glob.replace(/[.+?^${}()|[\]\\]/g, "\\$&")
    .replace(/\*\*\/|\*\*|\*/g, (m) => m === "**/" ? "(?:.*/)?" : m === "**" ? ".*" : "[^/]*");
  return new RegExp(`^${body}$`);
}

/** Each file under `rel` (a folder of `root`) whose extension is one of `exts`: its path and its lines. */
function* files(root: string, rel: string, exts: string[]): Generator<[string, number]> {
  for (const entry of Deno.readDirSync(`${root}/${rel}`)) {
    const path = `${rel}/${entry.name}`;
    if (entry.isDirectory) yield* files(root, path, exts);
    else if (entry.isFile && exts.includes(/\.([^.]+)$/.exec(entry.name)?.[1] ?? "")) {
      yield [path, linesOf(Deno.readTextFileSync(`${root}/${path}`))];
    }
  }
}

/** Lines per top-level folder of `root` that holds a counted file, in FOLDER_ORDER, and per core scope. */
export function countLines(root: string, scopes: Scopes): Counts {
  const found = new Map<string, number>();
  const core = new Map<string, number>([["total", 0]]);
  const rules = scopes.rules.map(([glob, scope]) => [globRegex(glob), scope] as const);
  for (const entry of Deno.readDirSync(root)) {
    if (!entry.isDirectory || entry.name.startsWith(".") || SKIPPED.has(entry.name)) continue;
    const inCore = scopes.folders.includes(entry.name);
    let lines = 0;
    let n = 0;
    for (const [path, count] of files(root, entry.name, inCore ? scopes.languages : ["ts"])) {
      lines += count;
      n++;
      if (!inCore) continue;
      const scope = rules.find(([re]) => re.test(path))?.[1];
      if (scope === undefined) throw new Error(`${path}: no rule of the core's scopes matches it`);
      core.set("total", core.get("total")! + count).set(scope, (core.get(scope) ?? 0) + count);
    }
    if (n > 0) found.set(entry.name, lines);
  }
  const rank = (name: string) => {
    const i = FOLDER_ORDER.indexOf(name);
    return i < 0 ? FOLDER_ORDER.length : i;
  };
  const names = [...found.keys()].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
  const order = new Set(["total", ...Object.keys(scopes.goals), ...scopes.rules.map((r) => r[1])]);
  return {
    folders: new Map(names.map((name) => [name, found.get(name)!])),
    core: new Map([...order].filter((s) => core.has(s)).map((s) => [s, core.get(s)!])),
  };
}

/** The headroom rule: today's count plus 5%, rounded up to a multiple of 100. */
export function capFor(lines: number): number {
  return Math.ceil((lines * (1 + HEADROOM)) / 100) * 100;
}

function readJson(path: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (e) {
    throw new Error(`${path}: cannot read the ${what} (${e instanceof Error ? e.message : e})`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(`${path}: not JSON (${e instanceof Error ? e.message : e})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new Error(`${path}: expected an object of ${what}`);
  }
  return value as Record<string, unknown>;
}

export function readScopes(path: string): Scopes {
  const s = readJson(path, "core's scopes");
  const strings = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === "string");
  if (
    !strings(s.folders) || !strings(s.languages) || typeof s.goals !== "object" || s.goals === null ||
    !Array.isArray(s.rules) || !s.rules.every((r) => strings(r) && r.length === 2)
  ) throw new Error(`${path}: expected { folders, languages, goals, rules: [[glob, scope], ...] }`);
  return s as unknown as Scopes;
}

export function readCaps(path: string): Caps {
  const caps = readJson(path, "caps");
  const out: Caps = { folders: {}, core: {} };
  for (const part of ["folders", "core"] as const) {
    for (const [name, cap] of Object.entries(caps[part] ?? {})) {
      if (!Number.isInteger(cap) || (cap as number) < 0) {
        throw new Error(
          `${path}: the cap of ${part} "${name}" must be a non-negative integer, got ${JSON.stringify(cap)}`,
        );
      }
      out[part][name] = cap as number;
    }
  }
  return out;
}

/** `--write-caps`: each cap lowered to the headroom rule where that is below it, never raised. */
export function lowerCaps(counts: Counts, old: Caps): Caps {
  const lower = (lines: Map<string, number>, caps: Record<string, number>) =>
    Object.fromEntries([...lines].map(([name, n]) => [name, Math.min(caps[name] ?? Infinity, capFor(n))]));
  return { folders: lower(counts.folders, old.folders), core: lower(counts.core, old.core) };
}

/** The report's lines and the failures (one line each, naming the folder or scope). */
export function checkCaps(
  counts: Counts,
  caps: Caps,
  scopes: Scopes,
  capsPath: string,
): { report: string[]; failures: string[] } {
  const report: string[] = [];
  const failures: string[] = [];
  const width = Math.max(7, ...[...counts.folders.keys(), ...counts.core.keys()].map((n) => n.length + 1));
  const num = (n: number | undefined) => n === undefined ? "      -" : n.toLocaleString("en-US").padStart(7);
  const check = (label: string, lines: number, cap: number | undefined): string => {
    if (cap === undefined && lines > 0) {
      failures.push(`${label} has ${lines} lines and no cap in ${capsPath}`);
      return "  NO CAP";
    }
    if (cap === undefined || lines <= cap) return "";
    failures.push(`${label} has ${lines} lines, over its cap of ${cap} in ${capsPath}`);
    return `  OVER by ${lines - cap}`;
  };
  report.push(`${"folder".padEnd(width)} ${"lines".padStart(7)} ${"cap".padStart(7)}`);
  let total = 0;
  for (const [name, lines] of counts.folders) {
    total += lines;
    const note = check(`${name}/`, lines, caps.folders[name]);
    report.push(`${(name + "/").padEnd(width)} ${num(lines)} ${num(caps.folders[name])}${note}`);
  }
  report.push(`${"total".padEnd(width)} ${num(total)}`);
  report.push(`${"core".padEnd(width)} ${"lines".padStart(7)} ${"cap".padStart(7)} ${"goal".padStart(7)}`);
  for (const [name, lines] of counts.core) {
    const note = check(`core ${name}`, lines, caps.core[name]);
    report.push(
      `${name.padEnd(width)} ${num(lines)} ${num(caps.core[name])} ${num(scopes.goals[name])}${note}`,
    );
  }
  report.push(
    `core: ${scopes.folders.join(", ")} in ${scopes.languages.map((l) => "." + l).join(" ")}; ` +
      "goals are information, not a failure",
  );
  return { report, failures };
}

function hasFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

function main(args: string[]): number {
  const { values } = parseArgs({
    args,
    options: {
      root: { type: "string", default: "." },
      caps: { type: "string" },
      scopes: { type: "string" },
      "write-caps": { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) {
    console.log(
      "usage: deno run --allow-read tools/line_count.ts [--root DIR] [--caps FILE] [--scopes FILE] [--write-caps]\n" +
        "Lines per top-level folder and per core scope against the caps; exit 1 names each one over its cap.\n" +
        "--write-caps lowers each cap to today's count +5% (rounded up to 100) where that is below it.",
    );
    return 0;
  }
  const root = values.root.replace(/\/+$/, "") || "/";
  const tools = root === "." ? "tools" : `${root}/tools`;
  const capsPath = values.caps ?? `${tools}/line_caps.json`;
  const scopes = readScopes(values.scopes ?? `${tools}/line_scopes.json`);
  const counts = countLines(root, scopes);
  if (values["write-caps"]) {
    const old = hasFile(capsPath) ? readCaps(capsPath) : { folders: {}, core: {} };
    Deno.writeTextFileSync(capsPath, JSON.stringify(lowerCaps(counts, old), null, 2) + "\n");
    console.log(`wrote ${capsPath}`);
  }
  const { report, failures } = checkCaps(counts, readCaps(capsPath), scopes, capsPath);
  for (const line of report) console.log(line);
  for (const line of failures) console.error(`error: ${line}`);
  return failures.length > 0 ? 1 : 0;
}

if (import.meta.main) {
  try {
    Deno.exit(main(Deno.args));
  } catch (e) {
    console.error(`error: ${e instanceof Error ? e.message : e}`);
    Deno.exit(1);
  }
}
