/**
 * initParams (init_params.ts) over worker threads: the same values bit for bit, each parameter drawn whole
 * by one worker from its own Philox stream, into shared memory. BERT-large's 336 M truncated normals take
 * about 30 s on one core (Box-Muller's log, cos and sin dominate); a 16-core GPU host does them in a few.
 */
import type { Graph } from "../ir/mod.ts";
import { numel } from "../ir/mod.ts";
import { initParams, streamOf } from "./init_params.ts";

/** Below this many random values the workers' start-up costs more than it saves. */
const PARALLEL_MIN_VALUES = 8_000_000;

export interface InitJob {
  readonly buffer: SharedArrayBuffer;
  readonly std: number;
  readonly stream: number;
}

export async function initParamsParallel(
  g: Graph,
  seed: number,
  workers = Math.min(16, navigator.hardwareConcurrency || 1),
): Promise<Map<string, Float32Array>> {
  const values = new Map<string, Float32Array>();
  const jobs: (InitJob & { size: number })[] = [];
  for (const [name, node] of g.sources("param")) {
    const size = numel(node.type.shape);
    const buffer = new SharedArrayBuffer(4 * size);
    values.set(name, new Float32Array(buffer));
    const init = node.attrs.init as string;
    if (init === "ones") values.get(name)!.fill(1);
    else if (init.startsWith("trunc_normal(")) {
      jobs.push({
        buffer,
        size,
        std: Number(init.slice("trunc_normal(".length, -1)),
        stream: streamOf(name),
      });
    }
  }
  const total = jobs.reduce((a, j) => a + j.size, 0);
  if (workers < 2 || total < PARALLEL_MIN_VALUES) return initParams(g, seed);
  // Largest first onto the least loaded worker: the 31 M-value embedding table sets the floor.
  const shares: (typeof jobs)[] = Array.from({ length: workers }, () => []);
  const load = new Array(workers).fill(0);
  for (const j of [...jobs].sort((a, b) => b.size - a.size)) {
    const w = load.indexOf(Math.min(...load));
    shares[w].push(j);
    load[w] += j.size;
  }
  await Promise.all(
    shares.filter((s) => s.length).map((share) =>
      new Promise<void>((resolve, reject) => {
        const w = new Worker(new URL("./init_params_worker.ts", import.meta.url), { type: "module" });
        w.onmessage = () => (w.terminate(), resolve());
        w.onerror = (
          e,
        ) => (e.preventDefault(), w.terminate(), reject(new Error(`init worker: ${e.message}`)));
        w.postMessage({ seed, jobs: share.map(({ buffer, std, stream }) => ({ buffer, std, stream })) });
      })
    ),
  );
  return values;
}
