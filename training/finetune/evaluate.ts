/**
 * Evaluation and prediction, batched on the device: the task's inference graph (logits, or start/end
 * logits) compiled once for --eval-batch-size rows, loaded with the current weights, run over a set; the
 * last partial batch is padded with copies of its first row, whose outputs are dropped. Then the task's
 * metrics on the host.
 */
import {
  type PostprocessOptions,
  type SquadPrediction,
  squadPredictions,
} from "../../data/finetune/squad_post.ts";
import { squadV1Eval, squadV2Eval } from "../../data/finetune/squad_eval.ts";
import { accuracy, binaryF1, matthews, pearson, spearman } from "../../data/finetune/glue_metrics.ts";
import type { StepExecutor } from "../../runtime/backend.ts";
import type { EvalSet, Row, TaskData } from "./tasks.ts";

export interface SetResult {
  set: string;
  metrics: Record<string, number>;
  /** Classification: class ids (regression: scores), one per row. */
  predictions?: number[];
  squad?: SquadPrediction[];
}

/** Runs the inference executor over rows; per-row outputs by name. */
export async function inferRows(
  ex: StepExecutor,
  rows: Row[],
  batch: number,
  seqLen: number,
  outputs: string[],
): Promise<Map<string, Float32Array[]>> {
  const out = new Map(outputs.map((n) => [n, [] as Float32Array[]]));
  for (let at = 0; at < rows.length; at += batch) {
    const chunk = rows.slice(at, at + batch);
    for (const field of ["input_ids", "token_type_ids", "attention_mask"] as const) {
      const buf = new Int32Array(batch * seqLen);
      for (let i = 0; i < batch; i++) buf.set((chunk[i] ?? chunk[0])[field], i * seqLen);
      ex.write(field, buf);
    }
    await ex.step();
    for (const name of outputs) {
      const v = Float32Array.from(await ex.read(name));
      const per = v.length / batch;
      for (let i = 0; i < chunk.length; i++) out.get(name)!.push(v.slice(i * per, (i + 1) * per));
    }
  }
  return out;
}

const argmax = (xs: Float32Array) => xs.reduce((best, x, i) => (x > xs[best] ? i : best), 0);

/** The metrics GLUE reports for a task (accuracy for everything that is not STS-B). */
export function classificationMetrics(task: string, pred: number[], gold: number[]): Record<string, number> {
  if (task === "sts-b") return { pearson: pearson(pred, gold), spearmanr: spearman(pred, gold) };
  const m: Record<string, number> = { accuracy: accuracy(pred, gold) };
  if (task === "mrpc" || task === "qqp") m.f1 = binaryF1(pred, gold);
  if (task === "cola") m.mcc = matthews(pred, gold);
  return m;
}

export async function evaluateSet(
  ex: StepExecutor,
  data: TaskData,
  set: EvalSet,
  batch: number,
  post: PostprocessOptions,
): Promise<SetResult> {
  if (data.kind === "qa") {
    const r = await inferRows(ex, set.rows, batch, data.seqLen, ["start_logits", "end_logits"]);
    const sq = set.squad!;
    const results = r.get("start_logits")!.map((s, i) => ({
      start_logits: s,
      end_logits: r.get("end_logits")![i],
    }));
    const preds = squadPredictions(sq.examples, sq.features, results, { ...post, v2: sq.v2 });
    const byId = new Map(preds.map((p) => [p.id, p.text]));
    let metrics: Record<string, number> = {};
    if (set.labelled) {
      metrics = sq.v2
        ? { ...squadV2Eval(sq.examples, byId, new Map(preds.map((p) => [p.id, p.nullScoreDiff ?? 0]))) }
        : squadV1Eval(sq.examples, byId);
    }
    return { set: set.name, metrics, squad: preds };
  }
  const logits = (await inferRows(ex, set.rows, batch, data.seqLen, ["logits"])).get("logits")!;
  const predictions = data.kind === "regression" ? logits.map((l) => l[0]) : logits.map(argmax);
  const metrics = set.labelled
    ? classificationMetrics(data.task, predictions, set.rows.map((r) => r.label!))
    : {};
  return { set: set.name, metrics, predictions };
}

/** The accuracy of always answering the most frequent class (the bar a classifier must clear). */
export function majorityBaseline(rows: Row[]): number {
  const counts = new Map<number, number>();
  for (const r of rows) counts.set(r.label!, (counts.get(r.label!) ?? 0) + 1);
  return rows.length ? Math.max(...counts.values()) / rows.length : 0;
}
