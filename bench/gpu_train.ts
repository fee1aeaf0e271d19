/**
 * BERT pre-training on CUDA checked and timed from one setup (issue 24): one graph, one parameter init,
 * then for each side (fused first, then unfused) one executor that gives, in this order,
 *
 *   1. the first step from the initial state: the losses (MLM near ln V, NSP near ln 2 at init), the loss
 *      scale, the gradient norm and a checksum of the updated parameters;
 *   2. `--steps` more steps on the same batch, the loss of each (it should fall: the batch is learned);
 *   3. throughput: timed rounds of graph launches, the median round (seq/s);
 *   4. per-kernel event times (the fused side), as the timings file `deno task compile --measured` reads.
 *
 * The unfused side starts from the same feeds, so its first step is compared with the fused one: BERT-large
 * fused = unfused on the GPU, within fp16's rounding. Every figure is written to --json as soon as it is
 * measured (atomically), so a run killed at any moment keeps what it measured; one line is printed per part.
 *
 *   deno run -A bench/gpu_train.ts [--model M] [--precision fp16] [--batch-size 64] [--seq-len 128]
 *       [--max-predictions 20] [--steps 20] [--rounds 5] [--steps-per-round 4] [--iterations 3]
 *       [--sides fused,unfused] --json FILE [--timings FILE]
 */
import { oneOf, parseFlags, positiveInt, runMain, UsageError } from "../cli/common.ts";
import { buildModelGraph } from "../optimizer/model_graph.ts";
import { optimizerFeeds } from "../optimizer/feeds.ts";
import { flatLayoutOf } from "../optimizer/flat_layout.ts";
import { OPT, STATE } from "../optimizer/update.ts";
import type { Precision } from "../compiler/training_graph/mixed_precision.ts";
import { CUDA } from "../engine/backends.ts";
import { ReferenceExecutor } from "../runtime/reference/reference_executor.ts";
import { CudaExecutor } from "../runtime/cuda/cuda_executor.ts";
import { openRow } from "../engine/choose_backend.ts";
import { loadModel } from "../models/load.ts";
import { writeFileAtomic } from "../model_io/outputs.ts";
import { initParamsParallel } from "../model_io/init_params_parallel.ts";
import { flatFromParams, readFlat, writeFlat } from "../training/run_state.ts";
import { seededRandom } from "../cases/random.ts";
import { median, timeRound } from "./step_timing.ts";

const USAGE = "deno run -A bench/gpu_train.ts [--model M] [--precision P] [--batch-size N] [--seq-len S]\n" +
  "  [--max-predictions P] [--steps N] [--rounds N] [--steps-per-round N] [--iterations K]\n" +
  "  [--sides fused,unfused] --json FILE [--timings FILE]\n";

interface StepFigures {
  loss: number;
  mlm_loss: number;
  nsp_loss: number;
  loss_scale: number;
  grad_norm: number;
  overflow: number;
  /** Sum and sum of |x| of the parameters after the step, in f64. */
  param_sum: number;
  param_abs_sum: number;
}

await runMain(async () => {
  const { values } = parseFlags(Deno.args, {
    model: { type: "string" },
    precision: { type: "string" },
    "batch-size": { type: "string" },
    "seq-len": { type: "string" },
    "max-predictions": { type: "string" },
    steps: { type: "string" },
    rounds: { type: "string" },
    "steps-per-round": { type: "string" },
    iterations: { type: "string" },
    sides: { type: "string" },
    json: { type: "string" },
    timings: { type: "string" },
  }, USAGE);
  if (!values.json) throw new UsageError("--json FILE is required (where the figures go)");
  const model = await loadModel(values.model ?? "models/bert-large.ts");
  const precision = oneOf<Precision>("precision", values.precision, ["fp32", "fp16", "bf16"], "fp16");
  const B = positiveInt("batch-size", values["batch-size"], 64);
  const S = positiveInt("seq-len", values["seq-len"], 128);
  const P = positiveInt("max-predictions", values["max-predictions"], 20);
  const steps = positiveInt("steps", values.steps, 20);
  const rounds = positiveInt("rounds", values.rounds, 5);
  const perRound = positiveInt("steps-per-round", values["steps-per-round"], 4);
  const iterations = positiveInt("iterations", values.iterations, 3);
  const sides = (values.sides ?? "fused,unfused").split(",");
  for (const s of sides) {
    if (!["fused", "unfused", "reference"].includes(s)) throw new UsageError(`--sides: unknown side '${s}'`);
  }

  const t0 = performance.now();
  const secs = () => +((performance.now() - t0) / 1000).toFixed(1);
  const result: Record<string, unknown> = {
    date: new Date().toISOString().slice(0, 10),
    command: `bench/gpu_train.ts ${Deno.args.join(" ")}`,
    model: model.name,
    precision,
    shape: { batch: B, seq: S, predictions: P },
  };
  const save = () => writeFileAtomic(values.json!, JSON.stringify(result, null, 2) + "\n");
  const say = (line: string) => console.log(`gpu_train [${secs()} s] ${line}`);

  const ctx = await openRow(CUDA);
  result.device = ctx.description;
  const g = buildModelGraph({
    model,
    mode: "train",
    precision,
    batchSize: B,
    seqLen: S,
    maxPredictions: P,
  }); // the defaults (LAMB, dynamic loss scaling in fp16), as gpu_precompile.ts builds it
  const layout = flatLayoutOf(g);
  const params = await initParamsParallel(g, 1);
  const flat = flatFromParams(params, layout);
  params.clear();
  say(`graph built, ${layout.total} parameters initialised`);
  // One fixed batch (no ignored labels: the loss at init is then the plain mean over every prediction).
  const r = seededRandom(7);
  const V = model.config.vocab_size;
  const batch: Record<string, ArrayLike<number>> = {
    input_ids: Int32Array.from({ length: B * S }, () => r.int(0, V)),
    token_type_ids: Int32Array.from({ length: B * S }, (_, i) => (i % S >= S / 2 ? 1 : 0)),
    attention_mask: Int32Array.from({ length: B * S }, (_, i) => (i % S < S - (i % 5) ? 1 : 0)),
    masked_lm_positions: Int32Array.from({ length: B * P }, () => r.int(0, S - 4)),
    masked_lm_ids: Int32Array.from({ length: B * P }, () => r.int(0, V)),
    next_sentence_labels: Int32Array.from({ length: B }, () => r.int(0, 2)),
    rng_key: [1, 7],
  };
  // A short warm-up, so the learning rate reaches its peak within the steps taken on this batch.
  const opt = optimizerFeeds(
    layout,
    { base: 6e-3, warmupProportion: 0.1, totalSteps: 10 * steps },
    { step: 0, lossScale: precision === "fp16" ? 2 ** 16 : 1 },
  );

  /** Each side's parameters after its first step, for the update comparisons. */
  const updated = new Map<string, Float32Array>();
  for (const side of sides) {
    const fuse = side === "fused";
    const figures: Record<string, unknown> = {};
    result[side] = figures;
    const tc = performance.now();
    // The reference interpreter (CPU, f64 inside) is the oracle for small models' first step.
    const { executor: ex, compiled } = side === "reference"
      ? { executor: new ReferenceExecutor(g), compiled: undefined }
      : await CUDA.compile(ctx, g, fuse);
    try {
      figures.kernels = compiled?.plan.kernels.length ?? 0;
      figures.compile_s = +((performance.now() - tc) / 1000).toFixed(1);
      for (const [n, v] of Object.entries({ ...opt, ...batch })) ex.write(n, v);
      writeFlat(ex, layout, OPT.flatParams, flat);
      const readStep = async (): Promise<{ figures: StepFigures; params: Float32Array }> => {
        const [loss, mlm, nsp, state] = await Promise.all(
          ["loss", "mlm_loss", "nsp_loss", OPT.state].map((n) => ex.read(n)),
        );
        const p = await readFlat(ex as Parameters<typeof readFlat>[0], layout, OPT.flatParams);
        let sum = 0, abs = 0;
        for (let i = 0; i < p.length; i++) (sum += p[i]), (abs += Math.abs(p[i]));
        return {
          params: p,
          figures: {
            loss: loss[0],
            mlm_loss: mlm[0],
            nsp_loss: nsp[0],
            loss_scale: state[STATE.lossScale],
            grad_norm: state[STATE.gradNorm],
            overflow: state[STATE.overflow],
            param_sum: sum,
            param_abs_sum: abs,
          },
        };
      };
      await ex.step();
      const { figures: first, params: after } = await readStep();
      figures.first_step = first;
      const lnV = Math.log(V);
      figures.init_loss_ok = Math.abs(first.mlm_loss - lnV) < 0.5 &&
        Math.abs(first.nsp_loss - Math.LN2) < 0.2;
      await save();
      say(
        `${side} compiled (${figures.kernels} kernels, ${figures.compile_s} s); first step: MLM ` +
          `${first.mlm_loss.toFixed(4)} (ln V = ${lnV.toFixed(4)}), NSP ${
            first.nsp_loss.toFixed(4)
          } (ln 2 = 0.6931), ` +
          `scale ${first.loss_scale}, grad norm ${first.grad_norm.toPrecision(5)}, params Σ ${
            first.param_sum.toPrecision(9)
          }` +
          ` ${figures.init_loss_ok ? "ok" : "OFF"}`,
      );
      // Each side's first update (w1 - w0) against every earlier side's, per parameter tensor: the worst
      // tensors name the kernel family that differs (attention, a bias gradient, the optimizer).
      for (const [other, w1] of updated) {
        const o = result[other] as { first_step: StepFigures };
        const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-30);
        // One pass over the parameters: per tensor, and the whole update as the sum of its tensors.
        let dd = 0, nb = 0;
        const per = layout.segments.map((seg) => {
          let sd = 0, sb = 0, sa = 0;
          for (let i = seg.offset; i < seg.offset + seg.size; i++) {
            const a = after[i] - flat[i], b = w1[i] - flat[i];
            sd += (a - b) ** 2, sb += b * b, sa += a * a;
          }
          dd += sd, nb += sb;
          return {
            tensor: seg.name,
            rel: Math.sqrt(sd / Math.max(sb, 1e-300)),
            norm: Math.sqrt(sa),
            [`${other}_norm`]: Math.sqrt(sb),
          };
        });
        const cmp = {
          loss_rel: rel(first.loss, o.first_step.loss),
          grad_norm_rel: rel(first.grad_norm, o.first_step.grad_norm),
          same_loss_scale: first.loss_scale === o.first_step.loss_scale,
          update_rel: Math.sqrt(dd / Math.max(nb, 1e-300)),
          worst_tensors: per.sort((a, b) => b.rel - a.rel).slice(0, 12),
        };
        // fp16 storage rounds differently where kernels merge: the losses agree to ~1e-3, the gradient norm
        // to ~1e-2, and the update (sign(g) scaled, at step 1) to a few percent.
        const ok = cmp.loss_rel < 2e-3 && cmp.grad_norm_rel < 2e-2 && cmp.update_rel < 0.05 &&
          cmp.same_loss_scale;
        const diffs = (result.update_diffs ??= {}) as Record<string, unknown>;
        diffs[`${side}_vs_${other}`] = { ...cmp, ok };
        await save();
        say(
          `${side} vs ${other} first step: loss ${cmp.loss_rel.toExponential(2)}, grad norm ` +
            `${cmp.grad_norm_rel.toExponential(2)}, update ${cmp.update_rel.toExponential(2)} (worst ` +
            `${
              cmp.worst_tensors.slice(0, 3).map((t) => `${t.tensor} ${t.rel.toExponential(2)}`).join(", ")
            }) ` +
            `${ok ? "ok" : "DIFFER"}`,
        );
      }
      updated.set(side, after);
      if (!(ex instanceof CudaExecutor)) continue; // the reference side gives its first step only
      const cuda = ex;
      const losses: number[] = [first.loss];
      const scales: number[] = [first.loss_scale], overflows: number[] = [first.overflow];
      for (let i = 0; i < (fuse ? steps : 0); i++) {
        await ex.step();
        const [loss, state] = await Promise.all([ex.read("loss"), ex.read(OPT.state)]);
        losses.push(loss[0]), scales.push(state[STATE.lossScale]), overflows.push(state[STATE.overflow]);
      }
      if (fuse) {
        figures.losses = losses;
        figures.loss_scales = scales;
        figures.overflows = overflows;
        figures.loss_falls = losses[losses.length - 1] < losses[0] - 0.5;
        await save();
        say(
          `${steps} steps on one batch: loss ${losses[0].toFixed(3)} -> ${losses.at(-1)!.toFixed(3)} ` +
            `${figures.loss_falls ? "falls" : "DOES NOT FALL"}`,
        );
      }
      await timeRound(cuda, perRound); // warm-up
      const times: number[] = [];
      for (let i = 0; i < rounds; i++) times.push(await timeRound(cuda, perRound));
      const ms = median(times);
      figures.ms = ms;
      figures.seq_per_s = B / (ms / 1000);
      figures.round_ms = times;
      await save();
      say(
        `${side} step ${ms.toFixed(2)} ms median of ${rounds} rounds, ${(B / (ms / 1000)).toFixed(1)} seq/s`,
      );
      if (fuse && values.timings) {
        const p = await cuda.profile(iterations);
        const kernels: Record<string, number> = {};
        for (const l of p.launches) kernels[l.name] = (kernels[l.name] ?? 0) + l.ns / 1e6;
        await writeFileAtomic(
          values.timings,
          JSON.stringify(
            {
              device: ctx.description,
              date: result.date,
              command: result.command,
              kernels_in_plan: compiled!.plan.kernels.length,
              step_ms: p.stepMs,
              kernels,
            },
            null,
            2,
          ) + "\n",
        );
        const total = Object.values(kernels).reduce((a, b) => a + b, 0);
        figures.profile = { step_ms: p.stepMs, kernel_ms: total, launches: p.launches.length };
        await save();
        say(
          `profile: ${p.launches.length} launches, ${total.toFixed(2)} ms of kernels, step ${
            p.stepMs.toFixed(2)
          } ms`,
        );
      }
    } finally {
      ex.destroy();
    }
  }
  say("done");
});
