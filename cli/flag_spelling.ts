/**
 * NVIDIA's scripts spell options in snake case (`--init_checkpoint`, `--do_train`); ours are kebab case.
 * Users come with NVIDIA's command lines, so every command accepts both: this rewrites the flag name of
 * each `--snake_case[=value]` argument to kebab case before parsing. Values are never touched, and
 * everything after a bare `--` is left alone. A command opts in with one call:
 * `parseFlags(kebabFlags(Deno.args), ...)`.
 */
export function kebabFlags(args: readonly string[]): string[] {
  const out: string[] = [];
  let rest = false;
  for (const a of args) {
    if (rest || !a.startsWith("--")) {
      out.push(a);
      continue;
    }
    if (a === "--") {
      rest = true;
      out.push(a);
      continue;
    }
    const eq = a.indexOf("=");
    const name = eq < 0 ? a : a.slice(0, eq);
    out.push(name.replaceAll("_", "-") + (eq < 0 ? "" : a.slice(eq)));
  }
  return out;
}

/** Hugging Face's example scripts' and Trainer's names (kebab-cased) for what our commands call otherwise. */
const HF_NAMES: Record<string, string> = {
  "model-name-or-path": "--init-checkpoint DIR (train, finetune) or --checkpoint DIR (infer, serve)",
  "per-device-train-batch-size": "--train-batch-size N",
  "per-device-eval-batch-size": "--eval-batch-size N (finetune) or --batch-size N (infer)",
  "output-dir": "--output-dir DIR (train, finetune) or --output FILE (infer)",
  "dataset-name": "--task NAME (finetune: squad, a GLUE task, spam, sentiment)",
  "tokenizer-name": "--vocab-file FILE",
  "config-name": "--config-file FILE",
  "fp16": "--precision fp16",
  "bf16": "--precision bf16",
  "logging-steps": "--log-freq N",
  "save-steps": "--num-steps-per-checkpoint N",
  "warmup-ratio": "--warmup-proportion X",
  "overwrite-output-dir":
    "a new --output-dir (an existing run folder is resumed or refused, never overwritten)",
};

/** A hint for an unknown `--flag` that is a Hugging Face name, or "". */
export function hfFlagHint(message: string): string {
  const name = /Unknown option '--([^']+)'/.exec(message)?.[1];
  const ours = name && HF_NAMES[name.replaceAll("_", "-")];
  return ours ? `; --${name} is Hugging Face's name, here: ${ours}` : "";
}
