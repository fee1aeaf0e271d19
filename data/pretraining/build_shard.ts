/**
 * Making one shard: every document of the shard, dupe_factor times (each pass masks differently), then the
 * shard's instances shuffled and written atomically. Runs in a worker or in the main thread alike.
 */
import { basename } from "node:path";
import { DataError } from "../shards/errors.ts";
import { ioCause } from "../../model_io/outputs.ts";
import { recordLayout } from "../shards/format.ts";
import { RecordBuffer, writeShard } from "../shards/writer.ts";
import type { TokenCorpus } from "./documents.ts";
import { InstanceMaker, type InstanceSettings, type InstanceStats, type InstanceVocab } from "./instances.ts";
import type { MaskStats } from "./masking.ts";
import { STREAM_SHARD } from "./plan.ts";
import { Rng } from "./rng.ts";

export interface ShardVocab extends InstanceVocab {
  pad: number;
}

export interface ShardJob {
  index: number;
  docs: Uint32Array;
  path: string;
  seed: number;
  dupeFactor: number;
  settings: InstanceSettings;
  vocab: ShardVocab;
}

export interface ShardResult {
  index: number;
  file: string;
  records: number;
  bytes: number;
  crc32: number;
  instances: InstanceStats;
  masking: MaskStats;
}

export async function buildShard(corpus: TokenCorpus, job: ShardJob): Promise<ShardResult> {
  const { settings, vocab } = job;
  const layout = recordLayout(settings.maxSeqLength, settings.maxPredictionsPerSeq, vocab.vocabSize);
  const rng = new Rng(job.seed, STREAM_SHARD, job.index);
  const maker = new InstanceMaker(corpus, settings, vocab);
  const records = new RecordBuffer(layout, vocab.pad, 4096);
  for (let dupe = 0; dupe < job.dupeFactor; dupe++) {
    for (const doc of job.docs) {
      maker.fromDocument(rng, doc, (m) => {
        records.append(
          m.input,
          m.n,
          m.segmentBStart,
          m.positions,
          m.labels,
          m.numMasked,
          m.isRandomNext ? 1 : 0,
        );
      });
    }
  }
  const order = new Uint32Array(records.count);
  for (let k = 0; k < order.length; k++) order[k] = k;
  rng.shuffle(order);
  const meta = { vocabSize: vocab.vocabSize, padId: vocab.pad };
  let written;
  try {
    written = await writeShard(job.path, layout, meta, records.permuted(order));
  } catch (e) {
    // Disk full, no permission, a directory in the way: the user's to fix, so one line naming the file.
    throw new DataError(`cannot write ${job.path}: ${ioCause(e)}`);
  }
  return {
    index: job.index,
    file: basename(job.path),
    ...written,
    instances: maker.stats,
    masking: maker.masker.stats,
  };
}
