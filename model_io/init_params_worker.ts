/// <reference lib="deno.worker" />
/** One worker of initParamsParallel: fills each job's shared buffer, then says so. */
import { fillParam } from "./init_params.ts";
import type { InitJob } from "./init_params_parallel.ts";

self.onmessage = (e: MessageEvent<{ seed: number; jobs: InitJob[] }>) => {
  for (const j of e.data.jobs) fillParam(new Float32Array(j.buffer), j.param, e.data.seed);
  self.postMessage("done");
};
