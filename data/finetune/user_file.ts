/**
 * Your own classification data (`--task classify --train-file x.jsonl|.csv|.tsv`): one example per line
 * or row, with a text, an optional second text and a label.
 *
 * - .jsonl: objects with `text` (or `sentence`, `text_a`), optional `text_pair` (or `sentence2`,
 *   `text_b`), and `label` (a string or a number).
 * - .csv / .tsv: a header row naming those columns; CSV fields may be quoted with "" escaping (RFC 4180,
 *   no newlines inside fields), TSV fields are taken as they are.
 *
 * Labels are strings; the label set is the train file's, sorted (numerically when all are numbers), so
 * class ids do not depend on the order of the rows. A dev or predict file with a label outside that set is
 * an error naming its file and line.
 */
import type { ClassificationExample } from "./classification.ts";
import { DatasetError, readDataFile } from "./errors.ts";

export interface LabelledText {
  textA: string;
  textB?: string;
  /** The label as written; undefined where the file has none. */
  label?: string;
  /** 1-based line in the file, for messages. */
  line: number;
}

const TEXT_A = ["text", "sentence", "text_a", "sentence1"];
const TEXT_B = ["text_pair", "sentence2", "text_b"];

/** Splits one CSV line (RFC 4180 quoting, no embedded newlines). */
export function splitCsvLine(line: string, where: string): string[] {
  const out: string[] = [];
  let i = 0;
  for (;;) {
    if (line[i] === '"') {
      let v = "";
      i++;
      for (;;) {
        const q = line.indexOf('"', i);
        if (q < 0) throw new DatasetError(`${where}: unterminated quoted field`);
        v += line.slice(i, q);
        if (line[q + 1] === '"') {
          v += '"';
          i = q + 2;
        } else {
          i = q + 1;
          break;
        }
      }
      out.push(v);
      if (i === line.length) return out;
      if (line[i] !== ",") throw new DatasetError(`${where}: text after a closing quote`);
      i++;
    } else {
      const c = line.indexOf(",", i);
      if (c < 0) return [...out, line.slice(i)];
      out.push(line.slice(i, c));
      i = c + 1;
    }
  }
}

/** Parses a labelled-text file's content; the format comes from the file name's extension. */
export function parseLabelledText(text: string, path: string): LabelledText[] {
  const ext = path.toLowerCase().split(".").pop();
  const lines = text.split("\n").map((l) => (l.endsWith("\r") ? l.slice(0, -1) : l));
  const rows: LabelledText[] = [];
  if (ext === "jsonl" || ext === "json") {
    lines.forEach((l, i) => {
      if (l.trim() === "") return;
      const where = `${path}:${i + 1}`;
      let o: Record<string, unknown>;
      try {
        o = JSON.parse(l);
      } catch (e) {
        throw new DatasetError(`${where}: invalid JSON (${(e as Error).message})`);
      }
      if (typeof o !== "object" || o === null || Array.isArray(o)) {
        throw new DatasetError(`${where}: not an object`);
      }
      const a = TEXT_A.find((k) => typeof o[k] === "string"),
        b = TEXT_B.find((k) => typeof o[k] === "string");
      if (!a) throw new DatasetError(`${where}: no text field (one of ${TEXT_A.join(", ")})`);
      const label = o.label;
      if (label !== undefined && typeof label !== "string" && typeof label !== "number") {
        throw new DatasetError(`${where}: 'label' is not a string or a number`);
      }
      rows.push({
        textA: o[a] as string,
        ...(b ? { textB: o[b] as string } : {}),
        ...(label !== undefined ? { label: String(label) } : {}),
        line: i + 1,
      });
    });
  } else if (ext === "csv" || ext === "tsv") {
    const first = lines.findIndex((l) => l.trim() !== "");
    if (first < 0) throw new DatasetError(`${path}: empty file`);
    const split = (l: string, where: string) => (ext === "csv" ? splitCsvLine(l, where) : l.split("\t"));
    const header = split(lines[first], `${path}:${first + 1}`).map((h) => h.trim().toLowerCase());
    const a = header.findIndex((h) => TEXT_A.includes(h)), b = header.findIndex((h) => TEXT_B.includes(h));
    const lab = header.indexOf("label");
    if (a < 0) {
      throw new DatasetError(
        `${path}:${first + 1}: the header names no text column (one of ${TEXT_A.join(", ")})`,
      );
    }
    for (let i = first + 1; i < lines.length; i++) {
      if (lines[i].trim() === "") continue;
      const where = `${path}:${i + 1}`;
      const cols = split(lines[i], where);
      if (cols.length !== header.length) {
        throw new DatasetError(`${where}: ${cols.length} columns, the header has ${header.length}`);
      }
      rows.push({
        textA: cols[a],
        ...(b >= 0 ? { textB: cols[b] } : {}),
        ...(lab >= 0 ? { label: cols[lab].trim() } : {}),
        line: i + 1,
      });
    }
  } else {
    throw new DatasetError(`${path}: unknown format '.${ext}' (use .jsonl, .csv or .tsv)`);
  }
  if (rows.length === 0) throw new DatasetError(`${path}: no examples (empty file)`);
  return rows;
}

/** The sorted label set of a labelled file (numerically when every label is a number). */
export function labelSet(rows: LabelledText[], path: string): string[] {
  const missing = rows.find((r) => r.label === undefined || r.label === "");
  if (missing) throw new DatasetError(`${path}:${missing.line}: no label`);
  const set = [...new Set(rows.map((r) => r.label!))];
  const numeric = set.every((l) => l.trim() !== "" && Number.isFinite(Number(l)));
  set.sort(numeric ? (x, y) => Number(x) - Number(y) : undefined);
  if (set.length < 2) {
    throw new DatasetError(`${path}: only one label ('${set[0]}'); classification needs two or more`);
  }
  return set;
}

/** Examples with class ids from `labels`; unlabelled rows get -1 unless `requireLabels`. */
export function toExamples(
  rows: LabelledText[],
  labels: readonly string[],
  path: string,
  requireLabels: boolean,
): ClassificationExample[] {
  return rows.map((r) => {
    let label = -1;
    if (r.label !== undefined && r.label !== "") {
      label = labels.indexOf(r.label);
      if (label < 0) {
        throw new DatasetError(
          `${path}:${r.line}: label '${r.label}' is not one of the train labels (${labels.join(", ")})`,
        );
      }
    } else if (requireLabels) throw new DatasetError(`${path}:${r.line}: no label`);
    return {
      guid: `${path.split("/").pop()}:${r.line}`,
      textA: r.textA,
      ...(r.textB !== undefined ? { textB: r.textB } : {}),
      label,
    };
  });
}

export async function readLabelledText(path: string): Promise<LabelledText[]> {
  return parseLabelledText(await readDataFile(path, "classification"), path);
}
