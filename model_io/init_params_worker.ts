/// <reference lib="deno.worker" />
/** One worker of initParamsParallel: fills each job's shared buffer, then says so. */
import { fillTruncatedNormal } from "./init_params.ts";
import type { InitJob } from "./init_params_parallel.ts";

self.onmessage = (e: MessageEvent<{ seed: number; jobs: InitJob[] }>) => {
  for (const j of e.data.jobs) fillTruncatedNormal(new Float32Array(j.buffer), e.data.seed, j.stream, j.std);
  self.postMessage("done");
};
