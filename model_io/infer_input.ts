/**
 * Reads inference input: JSON lines `{"input_ids": [...], "token_type_ids": [...], "attention_mask": [...]}`.
 * token_type_ids default to zeros and attention_mask to ones, as in Hugging Face. Every problem is
 * reported as an InputError naming the file, the line and what is wrong.
 */
export class InputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InputError";
  }
}

export interface EncodedRow {
  input_ids: number[];
  token_type_ids: number[];
  attention_mask: number[];
}

export interface InputLimits {
  vocabSize: number;
  typeVocabSize: number;
  maxPositions: number;
}

const FIELDS = ["input_ids", "token_type_ids", "attention_mask"] as const;

function intArray(v: unknown, field: string, at: string, lo: number, hi: number, what: string): number[] {
  if (!Array.isArray(v)) throw new InputError(`${at}: '${field}' must be an array of integers`);
  v.forEach((x, i) => {
    if (typeof x !== "number" || !Number.isInteger(x)) {
      throw new InputError(`${at}: ${field}[${i}] is ${JSON.stringify(x)}, not an integer`);
    }
    if (x < lo || x >= hi) {
      throw new InputError(`${at}: ${field}[${i}] = ${x} is outside ${what} [${lo}, ${hi})`);
    }
  });
  return v as number[];
}

export function parseEncodedRows(text: string, file: string, limits: InputLimits): EncodedRow[] {
  const rows: EncodedRow[] = [];
  const lines = text.split("\n");
  lines.forEach((line, i) => {
    if (line.trim() === "") return;
    const at = `${file}:${i + 1}`;
    let obj: unknown;
    try {
      obj = JSON.parse(line);
    } catch (e) {
      throw new InputError(`${at}: not valid JSON (${(e as Error).message})`);
    }
    if (typeof obj !== "object" || obj === null || Array.isArray(obj)) {
      throw new InputError(`${at}: expected a JSON object with ${FIELDS.join(", ")}`);
    }
    const o = obj as Record<string, unknown>;
    const unknown = Object.keys(o).filter((k) => !(FIELDS as readonly string[]).includes(k));
    if (unknown.length) {
      throw new InputError(`${at}: unknown field '${unknown[0]}' (expected ${FIELDS.join(", ")})`);
    }
    if (!("input_ids" in o)) throw new InputError(`${at}: missing 'input_ids'`);
    const ids = intArray(o.input_ids, "input_ids", at, 0, limits.vocabSize, "the vocabulary");
    if (ids.length === 0) throw new InputError(`${at}: input_ids is empty`);
    if (ids.length > limits.maxPositions) {
      throw new InputError(
        `${at}: ${ids.length} tokens exceed max_position_embeddings ${limits.maxPositions}`,
      );
    }
    const types = "token_type_ids" in o
      ? intArray(o.token_type_ids, "token_type_ids", at, 0, limits.typeVocabSize, "the token types")
      : ids.map(() => 0);
    const mask = "attention_mask" in o
      ? intArray(o.attention_mask, "attention_mask", at, 0, 2, "the mask values")
      : ids.map(() => 1);
    for (const [name, arr] of [["token_type_ids", types], ["attention_mask", mask]] as const) {
      if (arr.length !== ids.length) {
        throw new InputError(`${at}: ${name} has ${arr.length} entries but input_ids has ${ids.length}`);
      }
    }
    rows.push({ input_ids: ids, token_type_ids: types, attention_mask: mask });
  });
  if (rows.length === 0) throw new InputError(`${file}: no input rows`);
  return rows;
}
