/**
 * GLUE tasks from a user's copy of the GLUE data, in the official file layouts (download_glue_data.py):
 * a task folder holding train.tsv, dev.tsv and test.tsv (MNLI: dev_matched.tsv, dev_mismatched.tsv,
 * test_matched.tsv, test_mismatched.tsv), tab-separated with no quoting (BERT reads them with
 * quotechar=None). Column positions are those of BERT's run_classifier.py / Hugging Face's GLUE processors:
 *
 * - MRPC: header `Quality  #1 ID  #2 ID  #1 String  #2 String`; label 0/1, two ids, two sentences.
 * - SST-2: header `sentence  label`. CoLA: no header: source, label, original annotation, sentence.
 * - STS-B: header `index ...`, 10 columns, sentences in 7 and 8, a similarity score 0-5 last (regression).
 * - QQP: header `id qid1 qid2 question1 question2 is_duplicate`. QNLI: `index question sentence label`
 *   (entailment / not_entailment). RTE and WNLI: `index sentence1 sentence2 label`.
 * - MNLI: header `index ...`, sentences in columns 8 and 9, gold_label last (contradiction, entailment,
 *   neutral); dev files have more annotator columns than train, so the label is read from the end.
 *
 * Test sets have no labels (label -1). A label outside the task's set is an error naming file and line.
 */
import type { ClassificationExample } from "./classification.ts";
import { DatasetError, readDataFile } from "./errors.ts";

export const GLUE_TASKS = ["mrpc", "sst-2", "cola", "sts-b", "qqp", "qnli", "rte", "mnli", "wnli"] as const;
export type GlueTask = typeof GLUE_TASKS[number];
export type GlueSplit =
  | "train"
  | "dev"
  | "test"
  | "dev_matched"
  | "dev_mismatched"
  | "test_matched"
  | "test_mismatched";

/** Label names by class index, as config.json's id2label will show them; STS-B has one output, a score. */
export const GLUE_LABELS: Record<GlueTask, readonly string[]> = {
  mrpc: ["not_equivalent", "equivalent"],
  "sst-2": ["negative", "positive"],
  cola: ["unacceptable", "acceptable"],
  "sts-b": ["similarity"],
  qqp: ["not_duplicate", "duplicate"],
  qnli: ["entailment", "not_entailment"],
  rte: ["entailment", "not_entailment"],
  mnli: ["contradiction", "entailment", "neutral"],
  wnli: ["not_entailment", "entailment"],
};

/** How labels are spelled in the files, by class index; null: a real-valued score (regression). */
export const GLUE_FILE_LABELS: Record<GlueTask, readonly string[] | null> = {
  mrpc: ["0", "1"],
  "sst-2": ["0", "1"],
  cola: ["0", "1"],
  "sts-b": null,
  qqp: ["0", "1"],
  qnli: ["entailment", "not_entailment"],
  rte: ["entailment", "not_entailment"],
  mnli: ["contradiction", "entailment", "neutral"],
  wnli: ["0", "1"],
};

/** The dev sets a task is evaluated on (file names without .tsv) and its test sets. */
export function glueDevSplits(task: GlueTask): GlueSplit[] {
  return task === "mnli" ? ["dev_matched", "dev_mismatched"] : ["dev"];
}
export function glueTestSplits(task: GlueTask): GlueSplit[] {
  return task === "mnli" ? ["test_matched", "test_mismatched"] : ["test"];
}

interface Layout {
  /** First column of the header line, or null when the file has none. */
  header: string | null;
  columns: number;
  /** The files have at least `columns` columns (MNLI's dev files add annotator labels). */
  atLeast?: boolean;
  textA: number;
  textB?: number;
  /** Column of the label; -1 is the last column. */
  label?: number;
}

const pair = (header: string, columns: number, a: number, b: number, label?: number): Layout => ({
  header,
  columns,
  textA: a,
  textB: b,
  ...(label === undefined ? {} : { label }),
});

const LAYOUTS: Record<GlueTask, { labeled: Layout; test: Layout }> = {
  mrpc: { labeled: pair("Quality", 5, 3, 4, 0), test: pair("index", 5, 3, 4) },
  "sst-2": {
    labeled: { header: "sentence", columns: 2, textA: 0, label: 1 },
    test: { header: "index", columns: 2, textA: 1 },
  },
  cola: {
    labeled: { header: null, columns: 4, textA: 3, label: 1 },
    test: { header: "index", columns: 2, textA: 1 },
  },
  "sts-b": { labeled: pair("index", 10, 7, 8, 9), test: pair("index", 9, 7, 8) },
  qqp: { labeled: pair("id", 6, 3, 4, 5), test: pair("id", 3, 1, 2) },
  qnli: { labeled: pair("index", 4, 1, 2, 3), test: pair("index", 3, 1, 2) },
  rte: { labeled: pair("index", 4, 1, 2, 3), test: pair("index", 3, 1, 2) },
  wnli: { labeled: pair("index", 4, 1, 2, 3), test: pair("index", 3, 1, 2) },
  mnli: { labeled: { ...pair("index", 12, 8, 9, -1), atLeast: true }, test: pair("index", 10, 8, 9) },
};

/** "MRPC", "SST-2", "sst2", "STS-B", "stsb", "CoLA"... to a task name; anything else is a DatasetError. */
export function glueTask(name: string): GlueTask {
  const n = name.toLowerCase().replace(/^sst2$/, "sst-2").replace(/^stsb$/, "sts-b").replace(
    /^mnli-mm$/,
    "mnli",
  );
  if ((GLUE_TASKS as readonly string[]).includes(n)) return n as GlueTask;
  throw new DatasetError(
    `unknown GLUE task '${name}' (known: MRPC, SST-2, CoLA, STS-B, QQP, QNLI, RTE, MNLI, WNLI)`,
  );
}

/** Parses one GLUE TSV file's text; `path` names it in errors. */
export function parseGlue(
  task: GlueTask,
  split: GlueSplit,
  text: string,
  path: string,
): ClassificationExample[] {
  const layout = split.startsWith("test") ? LAYOUTS[task].test : LAYOUTS[task].labeled;
  const fileLabels = GLUE_FILE_LABELS[task];
  const lines = text.split("\n");
  const out: ClassificationExample[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].endsWith("\r") ? lines[i].slice(0, -1) : lines[i];
    const where = `${path}:${i + 1}`;
    if (i === 0 && layout.header !== null) {
      const first = line.split("\t")[0];
      if (first !== layout.header) {
        const want = `a header starting with '${layout.header}' (GLUE ${task} ${split}.tsv)`;
        throw new DatasetError(`${where}: expected ${want}, got '${first.slice(0, 40)}'`);
      }
      continue;
    }
    if (line === "") continue;
    const cols = line.split("\t");
    if (layout.atLeast ? cols.length < layout.columns : cols.length !== layout.columns) {
      const want = `${layout.atLeast ? "at least " : ""}${layout.columns}`;
      throw new DatasetError(`${where}: expected ${want} tab-separated columns, got ${cols.length}`);
    }
    let label = -1;
    if (layout.label !== undefined) {
      const l = cols[layout.label < 0 ? cols.length + layout.label : layout.label];
      if (fileLabels === null) {
        label = Number(l);
        if (l.trim() === "" || !Number.isFinite(label)) {
          throw new DatasetError(`${where}: score '${l}' is not a number`);
        }
      } else {
        label = fileLabels.indexOf(l);
        if (label < 0) {
          throw new DatasetError(
            `${where}: label '${l}' is not one of ${task}'s labels (${fileLabels.join(", ")})`,
          );
        }
      }
    }
    out.push({
      guid: `${split}-${out.length}`,
      textA: cols[layout.textA],
      ...(layout.textB !== undefined ? { textB: cols[layout.textB] } : {}),
      label,
    });
  }
  if (out.length === 0) throw new DatasetError(`${path}: no examples`);
  return out;
}

/** Reads `dir/{split}.tsv` of a GLUE task folder (e.g. glue_data/MRPC); a missing file names itself. */
export async function readGlue(
  task: GlueTask,
  dir: string,
  split: GlueSplit,
): Promise<ClassificationExample[]> {
  const path = `${dir.replace(/\/+$/, "")}/${split}.tsv`;
  return parseGlue(task, split, await readDataFile(path, `GLUE ${task} ${split}`), path);
}
