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

/**
 * The built-in corpus nlp-corpus: npm nlp-corpus 4.4.0 (Spencer Kelly, MIT), 100,000 shuffled English
 * sentences of film reviews, fiction, speeches, UN records, lyrics and chat, after five copies of the
 * sentiment train text (the fine-tuning domain, weighted up). Dropped: sentences equal to one of the
 * sentiment set's (train or dev), so dev stays unseen, and sentences with a word the sentiment package's
 * AFINN-165 lexicon scores -5 (its slurs and strongest profanity, which the chat and lyrics hold).
 * Documents of 8 consecutive sentences.
 */
export async function nlpCorpusText(): Promise<string> {
  const all: string[] = (await import("nlp-corpus")).default.all();
  const afinn = (await import("sentiment/languages/en/labels.json", { with: { type: "json" } })).default;
  const worst = new Set(
    Object.entries(afinn as Record<string, number>).filter(([, v]) => v <= -5).map(([w]) => w),
  );
  const known = new Set((await loadSentiment("all")).map((e) => e.textA.trim()));
  const kept = all.map((s) => s.replace(/\s+/g, " ").trim()).filter((s) =>
    s !== "" && !known.has(s) && !s.toLowerCase().split(/[^a-z-]+/).some((w) => worst.has(w))
  );
  const docs = [];
  for (let i = 0; i < kept.length; i += PER_DOCUMENT) docs.push(kept.slice(i, i + PER_DOCUMENT).join("\n"));
  return Array(5).fill(await sentimentTrainText()).join("\n") + "\n" + docs.join("\n\n") + "\n";
}
