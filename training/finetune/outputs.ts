/**
 * The files a fine-tuning run leaves beside its checkpoints: eval_results.json (metrics of each dev set,
 * before and after training), and predictions in the formats their users expect — for SQuAD
 * predictions.json ({id: text}), nbest_predictions.json ({id: [{text, probability, start_logit,
 * end_logit}]}) and for v2.0 null_odds.json, as BERT's run_squad.py writes them (the official evaluation
 * scripts read the first and the last); for classification a TSV per set with GLUE's submission header
 * `index  prediction` (labels spelled as in the task's files). Each file is written whole, then renamed.
 */
import { join } from "node:path";
import type { NBestEntry } from "../../data/finetune/squad_post.ts";
import { GLUE_FILE_LABELS, GLUE_TASKS, type GlueTask } from "../../data/finetune/glue.ts";
import type { SetResult } from "./evaluate.ts";
import type { TaskData } from "./tasks.ts";
import { writeFileAtomic } from "../../model_io/outputs.ts";

const json = (v: unknown) => JSON.stringify(v, null, 2) + "\n";

export interface EvalRecord {
  task: string;
  step: number;
  backend: string;
  /** Metrics per set before any training of this run (absent on resume). */
  before?: Record<string, Record<string, number>>;
  after: Record<string, Record<string, number>>;
  majority_baseline?: Record<string, number>;
  naive_bayes_baseline?: Record<string, number>;
}

export async function writeEvalResults(dir: string, r: EvalRecord): Promise<string> {
  const path = join(dir, "eval_results.json");
  await writeFileAtomic(path, json(r));
  return path;
}

function labelSpelling(data: TaskData): (id: number) => string {
  if (data.kind === "regression") return (v) => v.toFixed(3);
  const file = (GLUE_TASKS as readonly string[]).includes(data.task)
    ? GLUE_FILE_LABELS[data.task as GlueTask]
    : null;
  const names = file ?? data.labels;
  return (id) => names[id];
}

/**
 * An n-best entry as run_squad.py writes it: exactly text, probability, start_logit, end_logit, in that
 * order. squad_post.ts also carries the answer's character offsets (for inference); readers of the
 * official format do not expect them.
 */
function official(e: NBestEntry): Pick<NBestEntry, "text" | "probability" | "start_logit" | "end_logit"> {
  return { text: e.text, probability: e.probability, start_logit: e.start_logit, end_logit: e.end_logit };
}

/** Writes the prediction files of one set; returns their paths. */
export async function writePredictions(dir: string, data: TaskData, r: SetResult): Promise<string[]> {
  if (r.squad) {
    const suffix = r.set === "dev" ? "" : `_${r.set}`;
    const files: [string, unknown][] = [
      [`predictions${suffix}.json`, Object.fromEntries(r.squad.map((p) => [p.id, p.text]))],
      [
        `nbest_predictions${suffix}.json`,
        Object.fromEntries(r.squad.map((p) => [p.id, p.nbest.map(official)])),
      ],
    ];
    if (r.squad.some((p) => p.nullScoreDiff !== undefined)) {
      files.push([
        `null_odds${suffix}.json`,
        Object.fromEntries(r.squad.map((p) => [p.id, p.nullScoreDiff ?? 0])),
      ]);
    }
    for (const [name, v] of files) await writeFileAtomic(join(dir, name), json(v));
    return files.map(([name]) => join(dir, name));
  }
  const spell = labelSpelling(data);
  const lines = ["index\tprediction", ...r.predictions!.map((p, i) => `${i}\t${spell(p)}`)];
  const path = join(dir, `predictions_${r.set}.tsv`);
  await writeFileAtomic(path, lines.join("\n") + "\n");
  return [path];
}
