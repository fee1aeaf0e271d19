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
import { DebugFlagError } from "../compiler/debug.ts";
import { PlanError } from "../plan/plan_io.ts";
import { BackendUnavailableError } from "../engine/choose_backend.ts";
import { TrainOptionsError } from "../training/options.ts";
import { ScheduleError } from "../training/schedule.ts";
import { MetricsError } from "../training/metrics.ts";

export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

const USER_ERRORS = [
  UsageError,
  ConfigError,
  CheckpointError,
  SafetensorsError,
  InputError,
  ModelError,
  IRError,
  TokenizerError,
  DatasetError,
  DataError,
  DebugFlagError,
  BackendUnavailableError,
  PlanError,
  TrainOptionsError,
  ScheduleError,
  MetricsError,
];

export type FlagSpec = NonNullable<ParseArgsConfig["options"]>;

/** Parses flags (always adding --help); unknown flags and stray arguments are usage errors. */
export function parseFlags<T extends FlagSpec>(
  args: string[],
  options: T,
  help: string,
  allowPositionals = false,
) {
  const withHelp = { ...options, help: { type: "boolean", short: "h" } } as const;
  let parsed;
  try {
    parsed = parseArgs({ args, options: withHelp, allowPositionals, strict: true });
  } catch (e) {
    throw new UsageError(`${(e as Error).message.split("\n")[0]} (see --help)`);
  }
  if ((parsed.values as Record<string, unknown>).help) {
    console.log(help.trim());
    Deno.exit(0);
  }
  return parsed;
}

export function positiveInt(flag: string, v: string | undefined, fallback: number): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) {
    throw new UsageError(`--${flag} must be a positive integer, got '${v}'`);
  }
  return n;
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

/** Runs a command's main function; user errors become one line and exit code 1. */
export async function runMain(main: () => Promise<void>): Promise<void> {
  try {
    await main();
  } catch (e) {
    if (USER_ERRORS.some((cls) => e instanceof cls)) {
      console.error(`error: ${(e as Error).message.replaceAll("\n", " ")}`);
      Deno.exit(1);
    }
    throw e;
  }
}
