/**
 * The attention fusion alone: forward self-attention (cases/fusion_cases.ts `attentionForward`) compiled
 * fused with the attention kernel and fused without it (QKᵀ GEMM, softmax row kernel, PV GEMM), timed
 * in the same run on the same device, for BERT-tiny-like and BERT-base-like shapes. The shape rule of
 * compiler/fusion/attention.ts (`attentionPays`) is derived from these numbers.
 *
 *   deno run -A bench/attention.ts [--iterations 5] [--shapes b,heads,s,dh;...] [--precision fp32|fp16]
 *                                  [--dropout P] [--json FILE]
 *
 * The "attention off" side runs the same compile with the target's `fuseAttention: false`, so the only
 * difference is the three kernels versus one; the fused side skips the shape rule (`fuseAttention:
 * "always"`), so shapes the rule refuses are measured too. Times are per step: the median of --iterations rounds of 4 steps,
 * the two sides' rounds interleaved; the ratio is the median of the per-round ratios.
 */
import { parseFlags, positiveInt, runMain } from "../cli/common.ts";
import { compileGraph, SIMPLIFY_PASSES } from "../compiler/driver/compile.ts";
import { QUIET } from "../compiler/pipeline/debug.ts";
import { TARGETS } from "../compiler/targets/target.ts";
import { applyPrecision, type Precision } from "../compiler/training_graph/mixed_precision.ts";
import { quietContext, runPipeline } from "../compiler/pipeline/stage_runner.ts";
import { bytesMoved } from "../report/fusion_report.ts";
import { WEBGPU } from "../engine/backends.ts";
import { openRow } from "../engine/choose_backend.ts";
import { ModelBuilder } from "../dsl/mod.ts";
import type { Graph } from "../ir/mod.ts";
import type { GpuContext } from "../runtime/webgpu/device.ts";
import { WebGPUExecutor } from "../runtime/webgpu/webgpu_executor.ts";
import { randomFeeds } from "../cases/random_feeds.ts";
import { attentionForward } from "../cases/fusion_cases.ts";

import { median, type Side, timeRound } from "./step_timing.ts";
const HELP = `
deno run -A bench/attention.ts [--iterations K] [--shapes "b,heads,s,dh;..."] [--precision fp32|fp16]
                               [--dropout P] [--json FILE]

Forward self-attention with the attention fusion on and off (same run, same device): kernels, bytes
moved and median step time.

  --iterations K   timed rounds of 4 steps per side, interleaved, after a warm-up step (default 7)
  --shapes LIST    default "4,2,64,64;4,2,128,64;4,12,128,64;2,12,384,64;1,12,512,64"
  --precision P    fp32 (default) or fp16 (f16 GEMM operands, as deno task compile --precision fp16)
  --dropout P      attention dropout probability (default 0: inference)
  --json FILE      also write the results as JSON

Without a GPU, set DENO_WEBGPU_BACKEND=vulkan (Mesa's lavapipe).
`;

interface Shape {
  b: number;
  heads: number;
  s: number;
  dh: number;
}

function graphFor(shape: Shape, precision: Precision, dropoutProb: number): Graph {
  const m = new ModelBuilder("attention");
  m.output("out", attentionForward(m, "f32", shape, dropoutProb));
  return runPipeline(applyPrecision(m.graph, precision), SIMPLIFY_PASSES, quietContext())
    .graph;
}

/** A compiled plan ready to step, with its static figures. */
async function prepare(
  ctx: GpuContext,
  g: Graph,
  feeds: Record<string, ArrayLike<number>>,
  attention: boolean,
): Promise<{ executor: WebGPUExecutor; kernels: number; bytes: number }> {
  const target = { ...TARGETS.lavapipe, fuseAttention: attention ? "always" as const : false };
  const { plan } = compileGraph(g, { fuse: true, target, flags: QUIET });
  const executor = await WebGPUExecutor.create(ctx, plan);
  for (const [name, data] of Object.entries(feeds)) executor.write(name, data);
  await executor.step(); // warm-up: lavapipe compiles shaders on first dispatch
  await executor.finish();
  return { executor, kernels: plan.steps.filter((s) => s.op === "launch").length, bytes: bytesMoved(plan) };
}

/**
 * Both sides, rounds interleaved (fused, three-kernel, fused, …) so that load from other processes hits
 * both alike; the ratio is the median of the per-pair ratios.
 */
async function measurePair(
  ctx: GpuContext,
  g: Graph,
  feeds: Record<string, ArrayLike<number>>,
  iterations: number,
): Promise<{ fused: Side; split: Side; ratio: number }> {
  const a = await prepare(ctx, g, feeds, true);
  const b = await prepare(ctx, g, feeds, false);
  try {
    const ta: number[] = [], tb: number[] = [], ratios: number[] = [];
    for (let i = 0; i < iterations; i++) {
      ta.push(await timeRound(a.executor));
      tb.push(await timeRound(b.executor));
      ratios.push(ta[i] / tb[i]);
    }
    return {
      fused: { kernels: a.kernels, bytes: a.bytes, ms: median(ta) },
      split: { kernels: b.kernels, bytes: b.bytes, ms: median(tb) },
      ratio: median(ratios),
    };
  } finally {
    a.executor.destroy();
    b.executor.destroy();
  }
}

function parseShapes(raw: string): Shape[] {
  return raw.split(";").map((part) => {
    const xs = part.split(",").map((x) => Number(x.trim()));
    if (xs.length !== 4 || xs.some((x) => !Number.isInteger(x) || x < 1)) {
      throw new Error(`--shapes: '${part}' is not b,heads,s,dh (positive integers)`);
    }
    const [b, heads, s, dh] = xs;
    return { b, heads, s, dh };
  });
}

await runMain(async () => {
  const { values } = parseFlags(Deno.args, {
    iterations: { type: "string" },
    shapes: { type: "string" },
    precision: { type: "string" },
    dropout: { type: "string" },
    json: { type: "string" },
  }, HELP);
  const iterations = positiveInt("iterations", values.iterations, 7);
  const shapes = parseShapes(values.shapes ?? "4,2,64,64;4,2,128,64;4,12,128,64;2,12,384,64;1,12,512,64");
  const precision = (values.precision ?? "fp32") as Precision;
  if (precision !== "fp32" && precision !== "fp16") throw new Error(`--precision: fp32 or fp16`);
  const dropoutProb = Number(values.dropout ?? "0");
  const ctx = await openRow(WEBGPU);
  console.log(`device: ${ctx.description}; ${precision}, dropout ${dropoutProb}`);
  console.log(
    `${"b,heads,s,dh".padEnd(16)} ${"kernels".padStart(8)} ${"3-kernel".padStart(8)}  ${"MiB".padStart(8)} ${
      "3-kernel".padStart(8)
    }  ${"ms".padStart(8)} ${"3-kernel".padStart(8)} ${"ratio".padStart(8)}`,
  );
  const results = [];
  for (const shape of shapes) {
    const g = graphFor(shape, precision, dropoutProb);
    const feeds = randomFeeds(g, 5, {
      mask: (_r, i) => (i % shape.s < shape.s - 3 ? 1 : 0),
      rng_key: (r) => r.int(0, 2 ** 31),
    });
    const { fused, split, ratio } = await measurePair(ctx, g, feeds, iterations);
    const mib = (b: number) => (b / 2 ** 20).toFixed(2).padStart(8);
    console.log(
      `${[shape.b, shape.heads, shape.s, shape.dh].join(",").padEnd(16)} ${
        String(fused.kernels).padStart(8)
      } ${String(split.kernels).padStart(8)}  ${mib(fused.bytes)} ${mib(split.bytes)}  ${
        fused.ms.toFixed(2).padStart(8)
      } ${split.ms.toFixed(2).padStart(8)} ${(fused.ms / split.ms).toFixed(2).padStart(8)}`,
    );
    results.push({ shape, attention: fused, three_kernels: split, ratio_ms: ratio });
  }
  if (values.json) {
    const out = {
      device: ctx.description,
      date: new Date().toISOString().slice(0, 10),
      command: `deno run -A bench/attention.ts ${Deno.args.join(" ")}`.trim(),
      precision,
      dropout: dropoutProb,
      iterations,
      results,
    };
    await Deno.writeTextFile(values.json, JSON.stringify(out, null, 2) + "\n");
    console.log(`wrote ${values.json}`);
  }
});
