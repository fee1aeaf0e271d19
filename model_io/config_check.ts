/**
 * A checkpoint's config.json against its model.safetensors, from the safetensors header alone (no
 * weights read), before anything is built from the config: a config claiming 10^6 layers over a
 * checkpoint of 2 would otherwise build a graph of millions of nodes and run out of memory minutes later.
 */
import { CheckpointError } from "./checkpoint_error.ts";

/** The header of a safetensors file (name -> entry), or undefined when it cannot be read as one. */
export async function readSafetensorsHeader(
  path: string,
): Promise<Record<string, { shape?: number[] } & Record<string, unknown>> | undefined> {
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path);
  } catch {
    return undefined; // loading the weights reports a missing file with its own message
  }
  try {
    const len = new Uint8Array(8);
    if ((await file.read(len)) !== 8) return undefined;
    const n = Number(new DataView(len.buffer).getBigUint64(0, true));
    if (!(n > 0 && n <= 100 << 20)) return undefined;
    const buf = new Uint8Array(n);
    for (let off = 0; off < n;) {
      const got = await file.read(buf.subarray(off));
      if (got === null) return undefined;
      off += got;
    }
    const v = JSON.parse(new TextDecoder().decode(buf));
    return typeof v === "object" && v !== null ? v : undefined;
  } catch {
    return undefined;
  } finally {
    file.close();
  }
}

export interface ShapeConfig {
  vocab_size: number;
  hidden_size: number;
  num_hidden_layers: number;
}

/** Refuses a config whose layer count, vocabulary or hidden size disagree with the checkpoint's weights. */
export async function checkConfigAgainstWeights(dir: string, config: ShapeConfig): Promise<void> {
  const file = `${dir.replace(/\/$/, "")}/model.safetensors`;
  const header = await readSafetensorsHeader(file);
  if (!header) return;
  let layers = 0;
  let embedding: number[] | undefined;
  for (const [name, entry] of Object.entries(header)) {
    const m = /(?:^|\.)encoder\.layer\.(\d+)\./.exec(name);
    if (m) layers = Math.max(layers, Number(m[1]) + 1);
    if (/(?:^|\.)embeddings\.word_embeddings\.weight$/.test(name)) embedding = entry?.shape;
  }
  const cfg = `${dir.replace(/\/$/, "")}/config.json`;
  if (layers !== config.num_hidden_layers) {
    throw new CheckpointError(
      `${cfg}: num_hidden_layers is ${config.num_hidden_layers} but ${file} holds ${layers} layers`,
    );
  }
  if (embedding && (embedding[0] !== config.vocab_size || embedding[1] !== config.hidden_size)) {
    throw new CheckpointError(
      `${cfg}: vocab_size ${config.vocab_size} and hidden_size ${config.hidden_size} disagree with ` +
        `${file}'s word embeddings [${embedding}]`,
    );
  }
}
