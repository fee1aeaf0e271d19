/**
 * How long it takes to build BERT's pretraining graph from the DSL (forward) and to differentiate it
 * (backward), and how big the graphs are. Goal (issue 2): BERT-large under 1 s on the 2-core machine.
 *
 *   deno task bench:graph [--model models/bert-large.ts] [--batch-size 8] [--seq-len 128]
 *                         [--max-predictions 20] [--repeat 5] [--json FILE]
 */
import { parseFlags, positiveInt, runMain } from "../cli/common.ts";
import { differentiate } from "../compiler/training_graph/autodiff.ts";
import { type Graph, isElementwise, isLibrary, isMovement, isReduce, numel, type OpName } from "../ir/mod.ts";
import { loadModel } from "../models/load.ts";

const HELP = `
deno task bench:graph [--model FILE] [--batch-size N] [--seq-len S] [--max-predictions P] [--repeat R] [--json FILE]

Times building the pretraining training graph (forward, then autodiff) and prints node counts by kind.
Prints the median of R repeats (default 5) after one warm-up. Defaults: models/bert-large.ts, batch 8,
sequence 128, 20 masked positions.
`;

function counts(g: Graph) {
  const by = (pred: (op: OpName) => boolean) => g.nodes.filter((n) => pred(n.op)).length;
  return {
    nodes: g.nodes.length,
    elementwise: by(isElementwise),
    reduce: by(isReduce),
    movement: by(isMovement),
    matmul: by(isLibrary),
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

await runMain(async () => {
  const { values } = parseFlags(Deno.args, {
    model: { type: "string" },
    "batch-size": { type: "string" },
    "seq-len": { type: "string" },
    "max-predictions": { type: "string" },
    repeat: { type: "string" },
    json: { type: "string" },
  }, HELP);
  const modelPath = values.model ?? "models/bert-large.ts";
  const model = await loadModel(modelPath);
  const opts = {
    head: "pretraining" as const,
    mode: "train" as const,
    batchSize: positiveInt("batch-size", values["batch-size"], 8),
    seqLen: positiveInt("seq-len", values["seq-len"], 128),
    maxPredictions: positiveInt("max-predictions", values["max-predictions"], 20),
  };
  const repeat = positiveInt("repeat", values.repeat, 5);
  const fwd: number[] = [], bwd: number[] = [];
  let coldMs = 0;
  let forward: Graph | undefined, full: Graph | undefined;
  for (let r = 0; r <= repeat; r++) {
    const t0 = performance.now();
    forward = model.build(opts);
    const t1 = performance.now();
    full = differentiate(forward, "loss");
    const t2 = performance.now();
    if (r === 0) coldMs = t2 - t0; // the first round also pays for the JIT warming up
    else {
      fwd.push(t1 - t0);
      bwd.push(t2 - t1);
    }
  }
  const params = [...forward!.sources("param").values()].reduce(
    (n, p) => n + numel(p.type.shape),
    0,
  );
  const result = {
    model: model.name,
    ...opts,
    parameters: params,
    forward: counts(forward!),
    forward_and_backward: counts(full!),
    build_forward_ms: median(fwd),
    autodiff_ms: median(bwd),
    total_ms: median(fwd.map((f, i) => f + bwd[i])),
    cold_total_ms: coldMs,
    repeats: repeat,
  };
  console.log(
    `${model.name}: pretraining train graph, batch ${opts.batchSize}, seq ${opts.seqLen}, ` +
      `${opts.maxPredictions} masked positions, ${(params / 1e6).toFixed(1)}M parameters`,
  );
  console.log(
    `  forward            ${String(result.forward.nodes).padStart(6)} nodes   build ${
      result.build_forward_ms.toFixed(1)
    } ms`,
  );
  console.log(
    `  forward + backward ${String(result.forward_and_backward.nodes).padStart(6)} nodes   autodiff ${
      result.autodiff_ms.toFixed(1)
    } ms`,
  );
  const f = result.forward_and_backward;
  console.log(
    `    by kind: ${f.elementwise} elementwise, ${f.reduce} reduce, ${f.movement} movement, ${f.matmul} matmul`,
  );
  console.log(
    `  total ${result.total_ms.toFixed(1)} ms (median of ${repeat} warm), ${
      coldMs.toFixed(1)
    } ms cold; goal < 1000 ms`,
  );
  if (values.json) await Deno.writeTextFile(values.json, JSON.stringify(result, null, 2) + "\n");
});
