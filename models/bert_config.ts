/**
 * BERT's configuration, in the field names of Hugging Face's `config.json` and NVIDIA's
 * `bert_config.json`, with a validator that names the file and the field when something is wrong.
 * Optional fields default to the values of Hugging Face's BertConfig.
 */
import type { Activation } from "../dsl/mod.ts";

export interface BertConfig {
  vocab_size: number;
  hidden_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  intermediate_size: number;
  hidden_act: string;
  hidden_dropout_prob: number;
  attention_probs_dropout_prob: number;
  max_position_embeddings: number;
  type_vocab_size: number;
  initializer_range: number;
  layer_norm_eps: number;
  /** Classes of the sequence-classification head (HF: num_labels, or the size of id2label). */
  num_labels: number;
  /** Hugging Face's model class names, when the file gives them (e.g. ["BertForPreTraining"]). */
  architectures?: string[];
  /** The classification head's label names by class index ("0", "1", ...), when the file gives them. */
  id2label?: Record<string, string>;
}

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

const DEFAULTS = {
  hidden_act: "gelu",
  hidden_dropout_prob: 0.1,
  attention_probs_dropout_prob: 0.1,
  max_position_embeddings: 512,
  type_vocab_size: 2,
  initializer_range: 0.02,
  layer_norm_eps: 1e-12,
  num_labels: 2,
};

/** hidden_act spellings used by real checkpoints, and the DSL activation each one means. */
const ACTIVATIONS: Record<string, Activation> = {
  gelu: "gelu",
  gelu_new: "gelu_tanh",
  gelu_pytorch_tanh: "gelu_tanh",
  gelu_fast: "gelu_tanh",
  relu: "relu",
};

export function activationOf(cfg: BertConfig): Activation {
  return ACTIVATIONS[cfg.hidden_act];
}

const POSITIVE_INTS = [
  "vocab_size",
  "hidden_size",
  "num_hidden_layers",
  "num_attention_heads",
  "intermediate_size",
  "max_position_embeddings",
  "type_vocab_size",
  "num_labels",
] as const;
const PROBABILITIES = ["hidden_dropout_prob", "attention_probs_dropout_prob"] as const;
const REQUIRED = [
  "vocab_size",
  "hidden_size",
  "num_hidden_layers",
  "num_attention_heads",
  "intermediate_size",
];

/** Checks a parsed JSON object and fills defaults. `source` names the file in error messages. */
export function parseBertConfig(raw: unknown, source: string): BertConfig {
  const bad = (msg: string): never => {
    throw new ConfigError(`${source}: ${msg}`);
  };
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) bad("expected a JSON object");
  const obj = raw as Record<string, unknown>;
  for (const k of REQUIRED) if (!(k in obj)) bad(`missing field '${k}'`);
  const labelsFromMap = typeof obj.id2label === "object" && obj.id2label !== null
    ? Object.keys(obj.id2label).length
    : undefined;
  const cfg = { ...DEFAULTS, num_labels: labelsFromMap ?? DEFAULTS.num_labels, ...obj } as Record<
    string,
    unknown
  >;
  for (const k of POSITIVE_INTS) {
    const v = cfg[k];
    if (typeof v !== "number" || !Number.isInteger(v) || v <= 0) {
      bad(`field '${k}' must be a positive integer, got ${JSON.stringify(v)}`);
    }
  }
  for (const k of PROBABILITIES) {
    const v = cfg[k];
    if (typeof v !== "number" || !(v >= 0 && v < 1)) {
      bad(`field '${k}' must be a number in [0, 1), got ${JSON.stringify(v)}`);
    }
  }
  for (const k of ["initializer_range", "layer_norm_eps"]) {
    const v = cfg[k];
    if (typeof v !== "number" || !(v > 0)) {
      bad(`field '${k}' must be a positive number, got ${JSON.stringify(v)}`);
    }
  }
  if (typeof cfg.hidden_act !== "string" || !(cfg.hidden_act in ACTIVATIONS)) {
    bad(
      `field 'hidden_act' must be one of ${Object.keys(ACTIVATIONS).join(", ")}, got ${
        JSON.stringify(cfg.hidden_act)
      }`,
    );
  }
  const h = cfg.hidden_size as number, heads = cfg.num_attention_heads as number;
  if (h % heads !== 0) bad(`hidden_size ${h} is not a multiple of num_attention_heads ${heads}`);
  if (
    "architectures" in cfg &&
    !(Array.isArray(cfg.architectures) && cfg.architectures.every((a) => typeof a === "string"))
  ) bad(`field 'architectures' must be a list of strings`);
  if (
    "id2label" in cfg &&
    (typeof cfg.id2label !== "object" || cfg.id2label === null || Array.isArray(cfg.id2label) ||
      !Object.values(cfg.id2label).every((l) => typeof l === "string"))
  ) bad(`field 'id2label' must map class indices to label names (strings)`);
  const out: Record<string, unknown> = "architectures" in cfg ? { architectures: cfg.architectures } : {};
  if ("id2label" in cfg) out.id2label = cfg.id2label;
  for (const k of [...POSITIVE_INTS, ...PROBABILITIES, "hidden_act", "initializer_range", "layer_norm_eps"]) {
    out[k] = cfg[k];
  }
  return out as unknown as BertConfig;
}

/** Configs and model files are small: a path to more (a device, a data file) is refused before reading. */
export const MAX_MODEL_BYTES = 16 * 2 ** 20;

/** Reads and validates a config.json file. */
export function readBertConfig(path: string): BertConfig {
  let text: string;
  try {
    const st = Deno.statSync(path);
    const what = st.isFile ? `${st.size} bytes, too large for a config` : "not a regular file";
    if (!st.isFile || st.size > MAX_MODEL_BYTES) throw new ConfigError(`${path}: ${what}`);
    text = Deno.readTextFileSync(path);
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    throw new ConfigError(`${path}: cannot read (${(e as Error).message})`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new ConfigError(`${path}: not valid JSON (${(e as Error).message})`);
  }
  return parseBertConfig(raw, path);
}
