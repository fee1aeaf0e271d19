/**
 * Fine-tuning datasets: GLUE classification (MRPC, SST-2, CoLA) from a user's GLUE folder, SQuAD v1.1 and
 * v2.0 question answering with the maps back to answer text, and the built-in SpamAssassin spam/ham task.
 */
export {
  type ClassificationExample,
  type ClassificationFeature,
  classificationFeatures,
} from "./classification.ts";
export { DatasetError } from "./errors.ts";
export {
  GLUE_LABELS,
  GLUE_TASKS,
  type GlueSplit,
  type GlueTask,
  glueTask,
  parseGlue,
  readGlue,
} from "./glue.ts";
export {
  parseSquad,
  readSquad,
  type SquadAnswer,
  type SquadDataset,
  type SquadExample,
  type SquadFeature,
  type SquadFeatureOptions,
  squadFeatures,
} from "./squad.ts";
export {
  type NBestEntry,
  type PostprocessOptions,
  type SquadLogits,
  type SquadPrediction,
  squadPredictions,
} from "./squad_post.ts";
export { exactMatch, f1Score, normalizeAnswer, squadScores } from "./squad_eval.ts";
export {
  loadSpam,
  parseMessage,
  SPAM_LABELS,
  spamExamples,
  spamIndex,
  type SpamMessage,
  type SpamSplit,
  spamSplit,
  type SpamText,
} from "./spam.ts";
