/**
 * The compiler's debugging flags: the one place the environment variables DEBUG, DUMP_DIR, SKIP_PASSES
 * and FUSION_FUEL are read. Everything else takes a `DebugFlags` value, so a test (or a driver) can pass
 * flags explicitly instead of mutating the process environment.
 */

/** Anything with `get`, such as `Deno.env` or a Map. */
export interface EnvLike {
  get(key: string): string | undefined;
}

export type DebugLevel = 0 | 1 | 2 | 3 | 4 | 5;

export interface DebugFlags {
  /** 0 quiet; 1 pass and step timings; 2 kernel launches; 3 fusion decisions; 4 kernel source; 5 IR. */
  readonly level: DebugLevel;
  /** Where the pipeline writes numbered dumps: IR before and after each graph pass, the kernel state after each stage. */
  readonly dumpDir?: string;
  /** Pass and stage names the pipeline skips (compiler/README.md marks those that may be). */
  readonly skipPasses: ReadonlySet<string>;
  /** Number of fusions allowed before fusion stops (unlimited when undefined). */
  readonly fusionFuel?: number;
}

/** What each DEBUG level adds (each level includes the ones below it). */
export const DEBUG_LEVELS: Readonly<Record<Exclude<DebugLevel, 0>, string>> = {
  1: "pass and step timings",
  2: "one line per kernel launch (time, GB/s, GFLOP/s)",
  3: "fusion decisions with their reasons, simplification rule counts",
  4: "kernel source",
  5: "the IR after every pass, the kernel-level state after every stage",
};

export const QUIET: DebugFlags = { level: 0, skipPasses: new Set() };

/** A bad value in one of the debugging variables; the message names the variable. */
export class DebugFlagError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DebugFlagError";
  }
}

function nonNegativeInt(name: string, raw: string): number {
  const s = raw.trim();
  if (!/^[0-9]+$/.test(s) || !Number.isSafeInteger(Number(s))) {
    throw new DebugFlagError(`${name} must be a non-negative integer, got '${raw}'`);
  }
  return Number(s);
}

/**
 * Reads the debugging flags from `env` (default: the process environment). Unset or empty variables take
 * their defaults; malformed ones throw a DebugFlagError naming the variable and the value.
 */
export function readDebugFlags(env: EnvLike = Deno.env): DebugFlags {
  const get = (k: string): string | undefined => {
    const v = env.get(k);
    return v === undefined || v.trim() === "" ? undefined : v;
  };

  let level: DebugLevel = 0;
  const debug = get("DEBUG");
  if (debug !== undefined) {
    const n = nonNegativeInt("DEBUG", debug);
    if (n > 5) throw new DebugFlagError(`DEBUG must be a level from 0 to 5, got '${debug}'`);
    level = n as DebugLevel;
  }

  const dumpDir = get("DUMP_DIR");

  const skip = get("SKIP_PASSES");
  const skipPasses = new Set<string>();
  if (skip !== undefined) {
    for (const part of skip.split(",")) {
      const name = part.trim();
      if (name === "") continue; // tolerate "a,,b" and a trailing comma
      if (!/^[A-Za-z0-9_.-]+$/.test(name)) {
        throw new DebugFlagError(`SKIP_PASSES: '${name}' is not a pass name (letters, digits, _ . -)`);
      }
      skipPasses.add(name);
    }
  }

  const fuel = get("FUSION_FUEL");
  const fusionFuel = fuel === undefined ? undefined : nonNegativeInt("FUSION_FUEL", fuel);

  return {
    level,
    skipPasses,
    ...(dumpDir !== undefined ? { dumpDir } : {}),
    ...(fusionFuel !== undefined ? { fusionFuel } : {}),
  };
}

/**
 * A budget of steps (fusions) for bisecting a miscompile: with FUSION_FUEL=n the first n `take()` calls
 * succeed and the rest return false, so halving n finds the fusion that breaks a test.
 */
export class Fuel {
  #left: number;
  #used = 0;

  /** `limit` undefined means unlimited. */
  constructor(readonly limit?: number) {
    if (limit !== undefined && !(Number.isInteger(limit) && limit >= 0)) {
      throw new RangeError(`fuel must be a non-negative integer, got ${limit}`);
    }
    this.#left = limit ?? Infinity;
  }

  /** Spends one unit: true if there was one to spend. */
  take(): boolean {
    if (this.#left <= 0) return false;
    this.#left--;
    this.#used++;
    return true;
  }

  /** Units left (Infinity when unlimited). */
  get remaining(): number {
    return this.#left;
  }

  /** Units spent so far. */
  get used(): number {
    return this.#used;
  }
}

/** Writes `msg` to stderr when the flags' level is at least `level`. */
export function debugLog(flags: DebugFlags, level: number, msg: string | (() => string)): void {
  if (flags.level < level) return;
  console.error(typeof msg === "function" ? msg() : msg);
}

const FLAG_ROWS: readonly (readonly [string, string, string])[] = [
  ["`DEBUG`", "`0` to `5` (default `0`)", "log to stderr; each level adds to the ones below it"],
  ...Object.entries(DEBUG_LEVELS).map(([k, v]) => ["", `\`${k}\``, v] as const),
  [
    "`DUMP_DIR`",
    "a directory",
    "write `NN-before-<pass>.ir` and `NN-after-<pass>.ir` for every graph pass, `NN-after-<stage>.kernels` for every kernel stage",
  ],
  [
    "`SKIP_PASSES`",
    "pass names, comma-separated",
    "skip those passes (compiler/README.md marks which); an unknown or unskippable name is an error",
  ],
  [
    "`FUSION_FUEL`",
    "a non-negative integer `n`",
    "stop fusing after `n` fusions (to bisect a fusion bug); unset: no limit",
  ],
];

function markdownTable(head: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = head.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c].length)));
  const line = (cells: readonly string[]) => `| ${cells.map((x, c) => x.padEnd(widths[c])).join(" | ")} |`;
  return [line(head), `| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`, ...rows.map(line)].join("\n") +
    "\n";
}

/** The README's table of the debugging flags (Markdown, already in \`deno fmt\` layout). */
export const DEBUG_FLAGS_TABLE: string = markdownTable(["variable", "values", "effect"], FLAG_ROWS);
