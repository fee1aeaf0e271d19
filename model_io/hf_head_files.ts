/**
 * The parts of a Hugging Face model folder besides the weights that make it open with
 * `AutoTokenizer.from_pretrained` and `AutoModelFor...from_pretrained`: `config.json` naming the
 * architecture of the head (and, for classification, the labels), and the tokenizer as BertTokenizer
 * saves it — `vocab.txt`, `tokenizer_config.json` (with do_lower_case) and `special_tokens_map.json`.
 *
 * This file knows nothing of our tokenizer classes (model_io/ is a floor): the caller passes the tokens
 * in id order and the casing.
 */
import { CheckpointError } from "./checkpoint_error.ts";

export type HfHead = "pretraining" | "classification" | "qa";

/** Hugging Face's class for each of our heads. */
export const HF_ARCHITECTURE: Record<HfHead, string> = {
  pretraining: "BertForPreTraining",
  classification: "BertForSequenceClassification",
  qa: "BertForQuestionAnswering",
};

export interface HfTokenizerPart {
  /** Tokens in id order; written one a line as vocab.txt. */
  tokens: readonly string[];
  /** do_lower_case (lower-casing and accent stripping, as BERT's uncased models). */
  lowerCase: boolean;
}

export interface HfHeadParts {
  head: HfHead;
  /** The vocabulary the model was trained with; omitted, no tokenizer files are written. */
  tokenizer?: HfTokenizerPart;
  /**
   * Classification: the label of each output, by id. One output means regression (STS-B): written as
   * problem_type "regression" with the label name kept. Omitted: LABEL_0, LABEL_1, ... for num_labels.
   */
  labels?: readonly string[];
}

export const TOKENIZER_FILES = {
  vocab: "vocab.txt",
  tokenizerConfig: "tokenizer_config.json",
  specialTokens: "special_tokens_map.json",
} as const;

const SPECIAL = {
  unk_token: "[UNK]",
  sep_token: "[SEP]",
  pad_token: "[PAD]",
  cls_token: "[CLS]",
  mask_token: "[MASK]",
} as const;

/**
 * config.json contents for the head: `architectures` and `model_type`, and for classification
 * `num_labels`, `id2label` (string keys, as HF writes them), `label2id` and, for one output,
 * `problem_type: "regression"`. Other fields of `config` are kept.
 */
export function hfHeadConfig(
  config: object,
  parts: HfHeadParts,
  where = "config.json",
): Record<string, unknown> {
  const out: Record<string, unknown> = {
    ...config,
    architectures: [HF_ARCHITECTURE[parts.head]],
    model_type: "bert",
  };
  if (parts.head !== "classification") {
    // A head-less label map would make HF build a classifier of that size; keep none on other heads.
    delete out.id2label, delete out.label2id, delete out.problem_type;
    return out;
  }
  const given = (config as Record<string, unknown>).num_labels;
  const n = parts.labels?.length ?? (typeof given === "number" ? given : 2);
  const labels = parts.labels ?? Array.from({ length: n }, (_, i) => `LABEL_${i}`);
  if (labels.length === 0) {
    throw new CheckpointError(`${where}: a classification head needs at least one label`);
  }
  if (new Set(labels).size !== labels.length) {
    throw new CheckpointError(`${where}: labels are not distinct (${labels.join(", ")})`);
  }
  if (typeof given === "number" && given !== labels.length) {
    throw new CheckpointError(`${where}: ${labels.length} labels for num_labels ${given}`);
  }
  out.num_labels = labels.length;
  out.id2label = Object.fromEntries(labels.map((l, i) => [String(i), l]));
  out.label2id = Object.fromEntries(labels.map((l, i) => [l, i]));
  if (labels.length === 1) out.problem_type = "regression";
  else if (out.problem_type === "regression") delete out.problem_type;
  return out;
}

/** tokenizer_config.json as BertTokenizer.save_pretrained writes it (the fields it reads back). */
export function hfTokenizerConfig(tok: HfTokenizerPart, modelMaxLength: number): Record<string, unknown> {
  return {
    tokenizer_class: "BertTokenizer",
    do_lower_case: tok.lowerCase,
    // null: strip accents exactly when lower-casing, BERT's rule and HF's default.
    strip_accents: null,
    tokenize_chinese_chars: true,
    do_basic_tokenize: true,
    model_max_length: modelMaxLength,
    clean_up_tokenization_spaces: true,
    ...SPECIAL,
  };
}

export function hfSpecialTokensMap(): Record<string, string> {
  return { ...SPECIAL };
}

function checkTokenizer(tok: HfTokenizerPart, config: Record<string, unknown>, where: string): void {
  const have = new Set(tok.tokens);
  const lacking = Object.values(SPECIAL).filter((t) => !have.has(t));
  if (lacking.length) throw new CheckpointError(`${where}: the vocabulary has no ${lacking.join(", ")}`);
  const bad = tok.tokens.findIndex((t) => t === "" || /[\n\r]/.test(t));
  if (bad >= 0) {
    throw new CheckpointError(`${where}: token ${bad} is empty or holds a line break (vocab.txt cannot)`);
  }
  const size = config.vocab_size;
  // Fewer tokens than embedding rows is fine (NVIDIA pads 30,522 to 30,528); more would index past them.
  if (typeof size === "number" && tok.tokens.length > size) {
    throw new CheckpointError(`${where}: ${tok.tokens.length} tokens but vocab_size is ${size}`);
  }
}

async function writeAtomic(path: string, text: string): Promise<void> {
  const tmp = `${path}.tmp-${Deno.pid}`;
  const f = await Deno.open(tmp, { write: true, create: true, truncate: true });
  try {
    const bytes = new TextEncoder().encode(text);
    // A write may be partial; vocab.txt of 30k tokens is ~230 KB.
    for (let done = 0; done < bytes.length;) done += await f.write(bytes.subarray(done));
    await f.sync();
  } catch (e) {
    f.close();
    await Deno.remove(tmp).catch(() => {});
    throw e;
  }
  f.close();
  await Deno.rename(tmp, path);
}

/**
 * Writes config.json for the head and, when a tokenizer is given, vocab.txt, tokenizer_config.json and
 * special_tokens_map.json into `dir` (each file atomically and fsynced). Returns the names written.
 * Problems (a vocabulary without [CLS]/[SEP]/[MASK]/[PAD]/[UNK], labels that do not match num_labels)
 * are CheckpointErrors naming `dir`, raised before anything is written.
 */
export async function writeHfHeadFiles(dir: string, config: object, parts: HfHeadParts): Promise<string[]> {
  const full = hfHeadConfig(config, parts, `${dir}/config.json`);
  const files: [string, string][] = [["config.json", JSON.stringify(full, null, 2) + "\n"]];
  if (parts.tokenizer) {
    checkTokenizer(parts.tokenizer, full, dir);
    const maxLen = typeof full.max_position_embeddings === "number" ? full.max_position_embeddings : 512;
    files.push(
      [TOKENIZER_FILES.vocab, parts.tokenizer.tokens.join("\n") + "\n"],
      [
        TOKENIZER_FILES.tokenizerConfig,
        JSON.stringify(hfTokenizerConfig(parts.tokenizer, maxLen), null, 2) + "\n",
      ],
      [TOKENIZER_FILES.specialTokens, JSON.stringify(hfSpecialTokensMap(), null, 2) + "\n"],
    );
  }
  for (const [name, text] of files) await writeAtomic(`${dir}/${name}`, text);
  return files.map(([name]) => name);
}
