/**
 * What every command shares: flag parsing with help text, and turning the errors a user can cause (bad
 * flags, files, configs, checkpoints, inputs, model code) into one line on stderr and exit code 1,
 * instead of a stack trace. Anything else is a bug and keeps its stack trace.
 */
import { parseArgs, type ParseArgsConfig } from "node:util";
import { ModelError } from "../dsl/mod.ts";
import { IRError } from "../ir/mod.ts";
import { ConfigError } from "../models/bert_config.ts";
import { CheckpointError } from "../model_io/hf_checkpoint.ts";
import { SafetensorsError } from "../model_io/safetensors.ts";
import { InputError } from "../model_io/infer_input.ts";
import { TokenizerError } from "../data/tokenizer/mod.ts";
import { DatasetError } from "../data/finetune/mod.ts";
import { DataError } from "../data/shards/errors.ts";
import { DebugFlagError } from "../compiler/pipeline/debug.ts";
import { PlanError } from "../plan/plan_io.ts";
import { BACKEND_NAMES, BackendUnavailableError } from "../engine/choose_backend.ts";
import { TrainOptionsError } from "../training/options.ts";
import { ScheduleError } from "../training/schedule.ts";
import { MetricsError } from "../training/metrics.ts";
import { OutputError } from "../model_io/outputs.ts";
import { ioCause, isIoError } from "../model_io/outputs.ts";
import { ResourceError } from "../model_io/size_check.ts";
import { UsageError } from "./usage_error.ts";
import { intFlag, joinNegativeValues } from "./flags.ts";
import { hfFlagHint } from "./flag_spelling.ts";
import { CodeCacheError } from "../runtime/code_cache.ts";

export { UsageError };
export { intFlag, numberFlag } from "./flags.ts";

const USER_ERRORS = [
  ...[UsageError, CodeCacheError, ConfigError, CheckpointError, SafetensorsError, InputError, ModelError],
  ...[IRError, TokenizerError, DatasetError, DataError, DebugFlagError, BackendUnavailableError, PlanError],
  ...[TrainOptionsError, ScheduleError, MetricsError, OutputError, ResourceError],
];

export type FlagSpec = NonNullable<ParseArgsConfig["options"]>;

/** The running command's batch-size flags, which the out-of-memory line suggests (its own, no other's). */
let batchFlags: string[] = [];

/** Parses flags (always adding --help); unknown flags and stray arguments are usage errors. */
export function parseFlags<T extends FlagSpec>(
  args: string[],
  options: T,
  help: string,
  allowPositionals = false,
) {
  const withHelp = { ...options, help: { type: "boolean", short: "h" } } as const;
  batchFlags = Object.keys(options).filter((k) => k.endsWith("batch-size")).map((k) => `--${k}`);
  let parsed;
  try {
    const stringFlags = new Set(
      Object.entries(options).filter(([, o]) => o.type === "string").map(([k]) => k),
    );
    parsed = parseArgs({
      args: joinNegativeValues(args, stringFlags),
      options: withHelp,
      allowPositionals,
      strict: true,
    });
  } catch (e) {
    // node's advice on positionals (compile takes one) would split the line before the hint.
    const first = (e as Error).message.split("\n")[0].replace(/\. To specify a positional .*/, "");
    throw new UsageError(`${first}${hfFlagHint(first)} (see --help)`);
  }
  if ((parsed.values as Record<string, unknown>).help) {
    console.log(help.trim());
    Deno.exit(0);
  }
  return parsed;
}

/** The names of a space-separated list as a type: "a b" is "a" | "b". */
type Words<S extends string> = S extends `${infer A} ${infer B}` ? A | Words<B> : S;

/** `{ name: { type: "string" } }` for each name of "a b c" (one space apart): most flags take a value. */
export function stringFlags<S extends string>(names: S): Record<Words<S>, { type: "string" }> {
  return Object.fromEntries(names.split(" ").map((n) => [n, { type: "string" }])) as never;
}

/**
 * --backend (default auto, as in every command), --no-fuse and --precision, as infer and serve read them.
 * A flag the backend asked for would ignore is refused by name rather than dropped: --no-fuse on the
 * reference interpreter (it fuses nothing), --precision elsewhere (only the interpreter computes in f64).
 */
export function backendFlags(v: { backend?: string; "no-fuse"?: boolean; precision?: string }) {
  const name = oneOf("backend", v.backend, BACKEND_NAMES, "auto");
  if (v["no-fuse"] && name === "reference") {
    throw new UsageError("--no-fuse applies to --backend webgpu, cuda, cpu or auto");
  }
  if (v.precision !== undefined && name !== "reference") {
    throw new UsageError("--precision applies to --backend reference (the others compute in f32)");
  }
  return { name, fuse: !v["no-fuse"], precision: oneOf("precision", v.precision, ["f32", "f64"], "f32") };
}

/** A checkpoint folder flag's value, refused in one line naming it when it is a file or missing. */
export function checkpointFolder(flag: string, dir: string): void {
  let what = "no such folder";
  try {
    if (Deno.statSync(dir).isDirectory) return;
    what = "not a folder";
  } catch { /* missing or unreadable */ }
  throw new UsageError(`${flag} ${dir}: ${what} (give the checkpoint folder with config.json)`);
}

/** A positive integer flag (strict: digits only, see flags.ts). */
export function positiveInt(flag: string, v: string | undefined, fallback: number): number {
  return intFlag(flag, v, fallback, { min: 1 });
}

export function oneOf<T extends string>(
  flag: string,
  v: string | undefined,
  allowed: readonly T[],
  fallback: T,
): T {
  if (v === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(v)) {
    throw new UsageError(`--${flag} must be one of ${allowed.join(", ")}, got '${v}'`);
  }
  return v as T;
}

/** Out of memory as JavaScript reports it (typed array and buffer allocations, WebGPU's OOM). */
function outOfMemory(e: unknown): boolean {
  const m = e instanceof Error ? e.message : "";
  return (e instanceof RangeError && /allocation failed|Invalid typed array length|Array buffer/i.test(m)) ||
    (e instanceof Error && /out of memory|OutOfMemory/i.test(`${e.name} ${m}`));
}

/** The one-line message for a failure a user can cause (a bad flag, file, disk or size), or undefined. */
export function userMessage(e: unknown): string | undefined {
  if (USER_ERRORS.some((cls) => e instanceof cls)) return (e as Error).message.replaceAll("\n", " ");
  if (outOfMemory(e)) {
    const batch = batchFlags.length ? `smaller ${batchFlags.join(" or ")}` : "smaller batch";
    return `out of memory (${(e as Error).message.split("\n")[0]}); try a ${batch} or model`;
  }
  // A file-system failure that reached here unmapped: Deno's message names the path and the cause.
  if (isIoError(e)) {
    const path = /'([^']+)'/.exec((e as Error).message)?.[1];
    return `${path ?? "file system"}: ${ioCause(e)}`;
  }
  return undefined;
}

/**
 * Mesa's Vulkan loader prints "error: XDG_RUNTIME_DIR is invalid or not set" on every run without it,
 * which reads like our own fatal errors; the driver only wants a folder it may use.
 */
function quietDriverEnv(): void {
  try {
    if (!Deno.env.get("XDG_RUNTIME_DIR")) Deno.env.set("XDG_RUNTIME_DIR", "/tmp");
  } catch { /* no --allow-env: the driver may speak */ }
}

/** Runs a command's main function; user errors become one line and exit code 1. */
export async function runMain(main: () => Promise<void>): Promise<void> {
  quietDriverEnv();
  try {
    await main();
  } catch (e) {
    const line = userMessage(e);
    if (line !== undefined) {
      console.error(`error: ${line}`);
      Deno.exit(1);
    }
    throw e;
  }
}
