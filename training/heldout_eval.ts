/**
 * Held-out MLM and NSP accuracy on the run's own backend, beside the unigram baseline (data/heldout.ts).
 * The graph is the pre-training forward pass in train mode, for its label inputs and accuracy outputs,
 * without dropout, backward or optimizer: compiled once, given the current weights at each evaluation.
 */
import { applyPrecision, type Precision } from "../compiler/training_graph/mixed_precision.ts";
import type { BackendChoice } from "../engine/choose_backend.ts";
import type { BertModel } from "../models/bert.ts";
import type { Loader } from "../data/loader.ts";
import { BATCH_INPUTS, HeldOutSet, type HeldOutSplit } from "../data/heldout.ts";

/** What a held-out evaluation adds to its step's line of metrics.jsonl. */
export type HeldOutResult = Awaited<ReturnType<HeldOutEval["evaluate"]>>;
export type HeldOutEval = NonNullable<Awaited<ReturnType<typeof openHeldOut>>>;

interface HeldOutOptions {
  model: BertModel;
  precision: Precision;
  fuse: boolean;
  limit: number;
  split: HeldOutSplit;
  counts: Float64Array;
  token: (id: number) => string;
}

/** `loader` gives the shapes; `counts` are targetCounts of the training shards; `token` names an id. */
export async function openHeldOut(choice: BackendChoice, loader: Loader, o: HeldOutOptions) {
  if (!o.split.heldOut || o.limit === 0) return undefined; // one shard: nothing held out
  // At least 32 rows a forward pass: a test's micro-batch of 2 would take 512 passes on lavapipe.
  const batchSize = Math.max(loader.batchSize, 32), seqLen = loader.seqLength;
  const set = await HeldOutSet.open(loader.dir, o.counts, o.split.heldOut, o.limit, batchSize);
  const shape = { batchSize, seqLen, maxPredictions: loader.maxPredictions };
  const g = o.model.build({ head: "pretraining", mode: "train", ...shape, dropout: false });
  const { executor: ex } = await choice.compile(applyPrecision(g, o.precision), o.fuse);
  return {
    async evaluate(weights: Map<string, ArrayLike<number>>) {
      for (const [name] of g.sources("param")) ex.write(name, weights.get(name)!);
      const figures = await set.measure(async (b) => {
        for (const n of BATCH_INPUTS) ex.write(n, b[n]);
        await ex.step();
        const out = await Promise.all(["mlm_accuracy", "mlm_loss", "nsp_accuracy"].map((n) => ex.read(n)));
        return [out[0][0], out[1][0], out[2][0]] as const;
      });
      return { ...figures, unigram_token: o.token(set.unigramId) };
    },
    destroy: () => ex.destroy(),
  };
}
