/**
 * initParams (init_params.ts) over worker threads: the same values bit for bit, each parameter drawn whole
 * by one worker from its own Philox stream, into shared memory. BERT-large's 336 M truncated normals take
 * about 30 s on one core (Box-Muller's log, cos and sin dominate); a 16-core GPU host does them in a few.
 */
import type { Graph } from "../ir/mod.ts";
import { fillParam, initParams, type ParamInit, paramInits } from "./init_params.ts";

/** Below this many random values the workers' start-up costs more than it saves. */
const PARALLEL_MIN_VALUES = 8_000_000;

export interface InitJob {
  readonly buffer: SharedArrayBuffer;
  readonly param: ParamInit;
}

export async function initParamsParallel(
  g: Graph,
  seed: number,
  workers = Math.min(16, navigator.hardwareConcurrency || 1),
): Promise<Map<string, Float32Array>> {
  const inits = paramInits(g);
  const drawn = inits.filter((p) => p.std !== undefined);
  const total = drawn.reduce((a, p) => a + p.size, 0);
  if (workers < 2 || total < PARALLEL_MIN_VALUES) return initParams(g, seed);
  const values = new Map<string, Float32Array>();
  const buffers = new Map<string, SharedArrayBuffer>();
  for (const p of inits) {
    const buffer = new SharedArrayBuffer(4 * p.size);
    buffers.set(p.name, buffer);
    values.set(p.name, new Float32Array(buffer));
    if (p.std === undefined) fillParam(values.get(p.name)!, p, seed);
  }
  // Largest first onto the least loaded worker: the 31 M-value embedding table sets the floor.
  const shares: InitJob[][] = Array.from({ length: workers }, () => []);
  const load = new Array(workers).fill(0);
  for (const p of [...drawn].sort((a, b) => b.size - a.size)) {
    const w = load.indexOf(Math.min(...load));
    shares[w].push({ buffer: buffers.get(p.name)!, param: p });
    load[w] += p.size;
  }
  await Promise.all(
    shares.filter((s) => s.length).map((jobs) =>
      new Promise<void>((resolve, reject) => {
        const w = new Worker(new URL("./init_params_worker.ts", import.meta.url), { type: "module" });
        w.onmessage = () => (w.terminate(), resolve());
        w.onerror = (
          e,
        ) => (e.preventDefault(), w.terminate(), reject(new Error(`init worker: ${e.message}`)));
        w.postMessage({ seed, jobs });
      })
    ),
  );
  return values;
}
