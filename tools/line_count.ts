/**
 * Lines of TypeScript per top-level folder, against the caps in `tools/line_caps.json` (see DESIGN.md,
 * "Line caps").
 *
 * What is counted: every line of every `*.ts` file under each top-level folder of the root, recursively
 * (fixtures and generated files included; symbolic links are not followed), where a line is a "\n" or a
 * last line without one, as `wc -l` counts a file that ends in a newline. Files at the root itself,
 * hidden folders and `node_modules/` are not counted. A folder that holds TypeScript but has no cap fails
 * just like a folder over its cap, so a new folder gets a cap when it is made.
 *
 * It also prints ir/ + compiler/ + runtime/ against the project's target of 15,000 lines: information,
 * never a failure.
 *
 *   deno run --allow-read tools/line_count.ts [--root DIR] [--caps FILE]
 *   deno run --allow-read --allow-write tools/line_count.ts --write-caps   (deno task lines --write-caps)
 *
 * `--root` defaults to the current folder, `--caps` to ROOT/tools/line_caps.json. `--write-caps` rewrites
 * the caps from today's counts: each count plus 5%, rounded up to a multiple of 100. Exit code 1 names
 * each folder over its cap; 0 otherwise.
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
  "training",
  "data",
  "cli",
  "bench",
  "cases",
  "tools",
  "tests",
  "web",
];

/** The folders whose sum is held against TARGET_LINES. */
export const CORE = ["ir", "compiler", "runtime"];
export const TARGET_LINES = 15_000;
export const HEADROOM = 0.05;

const SKIPPED = new Set(["node_modules"]);

/** Lines of one file's text: the number of "\n", plus one for a last line without it. */
export function linesOf(text: string): number {
  let n = 0;
  for (let i = text.indexOf("\n"); i >= 0; i = text.indexOf("\n", i + 1)) n++;
  if (text.length > 0 && !text.endsWith("\n")) n++;
  return n;
}

function countFolder(dir: string): { lines: number; files: number } {
  let lines = 0;
  let files = 0;
  for (const entry of Deno.readDirSync(dir)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) {
      const sub = countFolder(path);
      lines += sub.lines;
      files += sub.files;
    } else if (entry.isFile && entry.name.endsWith(".ts")) {
      lines += linesOf(Deno.readTextFileSync(path));
      files++;
    }
  }
  return { lines, files };
}

/** Lines per top-level folder of `root` that holds at least one `*.ts` file, in FOLDER_ORDER. */
export function countLines(root: string): Map<string, number> {
  const found = new Map<string, number>();
  for (const entry of Deno.readDirSync(root)) {
    if (!entry.isDirectory || entry.name.startsWith(".") || SKIPPED.has(entry.name)) continue;
    const { lines, files } = countFolder(`${root}/${entry.name}`);
    if (files > 0) found.set(entry.name, lines);
  }
  const rank = (name: string) => {
    const i = FOLDER_ORDER.indexOf(name);
    return i < 0 ? FOLDER_ORDER.length : i;
  };
  const names = [...found.keys()].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
  return new Map(names.map((name) => [name, found.get(name)!]));
}

/** The headroom rule: today's count plus 5%, rounded up to a multiple of 100. */
export function capFor(lines: number): number {
  return Math.ceil((lines * (1 + HEADROOM)) / 100) * 100;
}

export function readCaps(path: string): Record<string, number> {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (e) {
    throw new Error(`${path}: cannot read the caps (${e instanceof Error ? e.message : e})`);
  }
  let caps: unknown;
  try {
    caps = JSON.parse(text);
  } catch (e) {
    throw new Error(`${path}: not JSON (${e instanceof Error ? e.message : e})`);
  }
  if (typeof caps !== "object" || caps === null || Array.isArray(caps)) {
    throw new Error(`${path}: expected an object of folder names to line caps`);
  }
  for (const [name, cap] of Object.entries(caps)) {
    if (!Number.isInteger(cap) || (cap as number) < 0) {
      throw new Error(
        `${path}: the cap of "${name}" must be a non-negative integer, got ${JSON.stringify(cap)}`,
      );
    }
  }
  return caps as Record<string, number>;
}

export function capsJson(counts: Map<string, number>): string {
  const caps: Record<string, number> = {};
  for (const [name, lines] of counts) caps[name] = capFor(lines);
  return JSON.stringify(caps, null, 2) + "\n";
}

/** The report's lines and the failures (one line each, naming the folder). */
export function checkCaps(
  counts: Map<string, number>,
  caps: Record<string, number>,
  capsPath: string,
): { report: string[]; failures: string[] } {
  const report: string[] = [];
  const failures: string[] = [];
  const width = Math.max(6, ...[...counts.keys()].map((n) => n.length + 1));
  const num = (n: number) => n.toLocaleString("en-US").padStart(7);
  report.push(`${"folder".padEnd(width)} ${"lines".padStart(7)} ${"cap".padStart(7)}`);
  let total = 0;
  for (const [name, lines] of counts) {
    total += lines;
    const cap = caps[name];
    let note = "";
    if (cap === undefined) {
      note = "  NO CAP";
      failures.push(`${name}/ has ${lines} lines of TypeScript and no cap in ${capsPath}`);
    } else if (lines > cap) {
      note = `  OVER by ${lines - cap}`;
      failures.push(`${name}/ has ${lines} lines, over its cap of ${cap} in ${capsPath}`);
    }
    report.push(
      `${(name + "/").padEnd(width)} ${num(lines)} ${cap === undefined ? "      -" : num(cap)}${note}`,
    );
  }
  report.push(`${"total".padEnd(width)} ${num(total)}`);
  const core = CORE.reduce((sum, name) => sum + (counts.get(name) ?? 0), 0);
  const verdict = core <= TARGET_LINES
    ? `${(TARGET_LINES - core).toLocaleString("en-US")} under`
    : `${(core - TARGET_LINES).toLocaleString("en-US")} over`;
  report.push(
    `${CORE.join(" + ")}: ${core.toLocaleString("en-US")} lines; target ${
      TARGET_LINES.toLocaleString("en-US")
    } (${verdict}; information, not a failure)`,
  );
  return { report, failures };
}

function main(args: string[]): number {
  const { values } = parseArgs({
    args,
    options: {
      root: { type: "string", default: "." },
      caps: { type: "string" },
      "write-caps": { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) {
    console.log(
      "usage: deno run --allow-read tools/line_count.ts [--root DIR] [--caps FILE] [--write-caps]\n" +
        "Lines of TypeScript per top-level folder against the caps; exit 1 names each folder over its cap.\n" +
        "--write-caps rewrites the caps from today's counts (+5%, rounded up to a multiple of 100).",
    );
    return 0;
  }
  const root = values.root.replace(/\/+$/, "") || "/";
  const capsPath = values.caps ?? (root === "." ? "tools/line_caps.json" : `${root}/tools/line_caps.json`);
  const counts = countLines(root);
  if (values["write-caps"]) {
    Deno.writeTextFileSync(capsPath, capsJson(counts));
    console.log(`wrote ${capsPath}`);
  }
  const { report, failures } = checkCaps(counts, readCaps(capsPath), capsPath);
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
