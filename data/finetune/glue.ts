/**
 * GLUE classification tasks from a user's copy of the GLUE data, in the official file layouts
 * (download_glue_data.py): a task folder holding train.tsv, dev.tsv and test.tsv, tab-separated with
 * no quoting (BERT reads them with quotechar=None).
 *
 * - MRPC: header `Quality  #1 ID  #2 ID  #1 String  #2 String`; label, two ids, two sentences.
 *   test.tsv: header `index  #1 ID  #2 ID  #1 String  #2 String`.
 * - SST-2: header `sentence  label`. test.tsv: header `index  sentence`.
 * - CoLA: train/dev have no header: source, label, original annotation, sentence.
 *   test.tsv: header `index  sentence`.
 *
 * Labels are 0/1 everywhere; test sets have none (label -1).
 */
import type { ClassificationExample } from "./classification.ts";
import { DatasetError, readDataFile } from "./errors.ts";

export const GLUE_TASKS = ["mrpc", "sst-2", "cola"] as const;
export type GlueTask = typeof GLUE_TASKS[number];
export type GlueSplit = "train" | "dev" | "test";

/** Names of label 0 and label 1. */
export const GLUE_LABELS: Record<GlueTask, [string, string]> = {
  mrpc: ["not_equivalent", "equivalent"],
  "sst-2": ["negative", "positive"],
  cola: ["unacceptable", "acceptable"],
};

interface Layout {
  /** First column of the header line, or null when the file has none. */
  header: string | null;
  columns: number;
  textA: number;
  textB?: number;
  label?: number;
}

const LAYOUTS: Record<GlueTask, { labeled: Layout; test: Layout }> = {
  mrpc: {
    labeled: { header: "Quality", columns: 5, textA: 3, textB: 4, label: 0 },
    test: { header: "index", columns: 5, textA: 3, textB: 4 },
  },
  "sst-2": {
    labeled: { header: "sentence", columns: 2, textA: 0, label: 1 },
    test: { header: "index", columns: 2, textA: 1 },
  },
  cola: {
    labeled: { header: null, columns: 4, textA: 3, label: 1 },
    test: { header: "index", columns: 2, textA: 1 },
  },
};

/** "MRPC", "SST-2", "sst2", "CoLA"... to a task name; anything else is a DatasetError. */
export function glueTask(name: string): GlueTask {
  const n = name.toLowerCase().replace(/^sst2$/, "sst-2");
  if ((GLUE_TASKS as readonly string[]).includes(n)) return n as GlueTask;
  throw new DatasetError(`unknown GLUE task '${name}' (known: MRPC, SST-2, CoLA)`);
}

/** Parses one GLUE TSV file's text; `path` names it in errors. */
export function parseGlue(
  task: GlueTask,
  split: GlueSplit,
  text: string,
  path: string,
): ClassificationExample[] {
  const layout = split === "test" ? LAYOUTS[task].test : LAYOUTS[task].labeled;
  const lines = text.split("\n");
  const out: ClassificationExample[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].endsWith("\r") ? lines[i].slice(0, -1) : lines[i];
    const where = `${path}:${i + 1}`;
    if (i === 0 && layout.header !== null) {
      const first = line.split("\t")[0];
      if (first !== layout.header) {
        throw new DatasetError(
          `${where}: expected a header starting with '${layout.header}' (GLUE ${task} ${split}.tsv), got '${
            first.slice(0, 40)
          }'`,
        );
      }
      continue;
    }
    if (line === "") continue;
    const cols = line.split("\t");
    if (cols.length !== layout.columns) {
      throw new DatasetError(
        `${where}: expected ${layout.columns} tab-separated columns, got ${cols.length}`,
      );
    }
    let label = -1;
    if (layout.label !== undefined) {
      const l = cols[layout.label];
      if (l !== "0" && l !== "1") throw new DatasetError(`${where}: label '${l}' is not 0 or 1`);
      label = Number(l);
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

/** Reads `dir/{split}.tsv` of a GLUE task folder (e.g. glue_data/MRPC). */
export async function readGlue(
  task: GlueTask,
  dir: string,
  split: GlueSplit,
): Promise<ClassificationExample[]> {
  const path = `${dir.replace(/\/+$/, "")}/${split}.tsv`;
  return parseGlue(task, split, await readDataFile(path, `GLUE ${task} ${split}`), path);
}
