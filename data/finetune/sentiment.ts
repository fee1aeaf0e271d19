/**
 * The built-in fine-tuning task: the labelled sentences that ship with the npm package `sentiment`
 * (test/fixtures/{imdb,yelp,amazon}.json, 1,000 sentences each, 500 negative and 500 positive; they are
 * the "Sentiment Labelled Sentences" set of Kotzias et al., KDD 2015). Each file also ends with one empty
 * record ({"text": "", "class": null}), which is left out.
 *
 * The dev split is fixed by the sentence itself: dev when FNV-1a(text) mod 5 is 0 (about 20%). It depends
 * on nothing else, so it never changes, and a sentence repeated in the data always lands on one side.
 */
import type { ClassificationExample } from "./classification.ts";
import { DatasetError } from "./errors.ts";
import { fnv1a } from "./spam.ts";

export const SENTIMENT_LABELS = ["negative", "positive"] as const;
export const SENTIMENT_SOURCES = ["imdb", "yelp", "amazon"] as const;
export type SentimentSplit = "train" | "dev";

export function sentimentSplit(text: string): SentimentSplit {
  return fnv1a(text) % 5 === 0 ? "dev" : "train";
}

async function fixture(source: string): Promise<unknown> {
  // One literal specifier per file, so that `deno compile`/bundlers see them.
  switch (source) {
    case "imdb":
      return (await import("sentiment/test/fixtures/imdb.json", { with: { type: "json" } })).default;
    case "yelp":
      return (await import("sentiment/test/fixtures/yelp.json", { with: { type: "json" } })).default;
    default:
      return (await import("sentiment/test/fixtures/amazon.json", { with: { type: "json" } })).default;
  }
}

/** The examples of one split (or all), in file order: imdb, yelp, amazon. */
export async function loadSentiment(split: SentimentSplit | "all"): Promise<ClassificationExample[]> {
  const out: ClassificationExample[] = [];
  for (const source of SENTIMENT_SOURCES) {
    const rows = await fixture(source);
    if (!Array.isArray(rows)) throw new DatasetError(`sentiment ${source}.json: not a list`);
    rows.forEach((r: { text?: unknown; class?: unknown }, i) => {
      if (typeof r?.text !== "string") throw new DatasetError(`sentiment ${source}.json[${i}]: no 'text'`);
      if (r.text.trim() === "" && r.class === null) return; // the trailing empty record
      if (r.class !== 0 && r.class !== 1) {
        throw new DatasetError(
          `sentiment ${source}.json[${i}]: class ${JSON.stringify(r.class)} is not 0 or 1`,
        );
      }
      const text = r.text.trim();
      if (split !== "all" && sentimentSplit(text) !== split) return;
      out.push({ guid: `${source}-${i}`, textA: text, label: r.class });
    });
  }
  return out;
}
