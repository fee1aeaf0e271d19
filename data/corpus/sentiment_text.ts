/**
 * The unlabelled text of the built-in sentiment set's train split as a pretraining corpus: domain-adaptive
 * pre-training (Gururangan et al. 2020, "Don't Stop Pretraining"). Labels are dropped and dev sentences are
 * never included (finetune/sentiment.ts decides the split by the sentence alone), so a model pre-trained
 * on it has not seen the sentences it is later scored on. BERT's text format: one sentence per line, a
 * document of 8 consecutive train sentences of one source, a blank line between documents (the sentences
 * are independent reviews, so NSP's "next" pairs share a source, not a story).
 */
import { loadSentiment } from "../finetune/sentiment.ts";

const PER_DOCUMENT = 8;

export async function sentimentTrainText(): Promise<string> {
  const docs: string[][] = [];
  let source = "";
  for (const e of await loadSentiment("train")) {
    const from = e.guid.split("-")[0];
    if (from !== source || docs.at(-1)!.length === PER_DOCUMENT) docs.push([]);
    source = from;
    docs.at(-1)!.push(e.textA);
  }
  return docs.map((d) => d.join("\n")).join("\n\n") + "\n";
}
