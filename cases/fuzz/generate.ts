/**
 * One fuzz graph per seed, deterministic: a chain of random blocks (cases/fuzz/blocks.ts) over a random
 * working shape, in one of three precisions — f32, f16 storage throughout (the graph's own dtype), or
 * mixed (f16 GEMMs with the storage policy narrowing activations, as training does) — and in one of three
 * modes: forward only, gradients (autodiff of a random loss), or a whole training step (loss scaling,
 * autodiff, LAMB or AdamW over the flat parameter vector, as optimizer/model_graph.ts builds it). The feeds
 * come with the graph, exact in their dtypes, so the reference and every device see the same numbers.
 */
import { crossEntropy, ModelBuilder, type Tensor } from "../../dsl/mod.ts";
import type { Graph } from "../../ir/mod.ts";
import { roundF16 } from "../../numeric/half.ts";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { applyPrecision } from "../../compiler/training_graph/mixed_precision.ts";
import { flatLayoutOf } from "../../optimizer/flat_layout.ts";
import { optimizerFeeds } from "../../optimizer/feeds.ts";
import { appendOptimizer, appendScaledLoss, OPT, type OptimizerKind } from "../../optimizer/update.ts";
import { type Rng, seededRandom } from "../random.ts";
import { BLOCKS, type Ctx, type FeedRule, leaf } from "./blocks.ts";

export type Flavor = "f32" | "f16" | "mixed";
export type Mode = "forward" | "grad" | "train";

export interface FuzzGraph {
  readonly seed: number;
  readonly graph: Graph;
  readonly feeds: Record<string, Float64Array>;
  readonly flavor: Flavor;
  readonly mode: Mode;
  readonly optimizer?: OptimizerKind;
  /** The blocks in build order (coverage statistics, and the replay's description). */
  readonly blocks: readonly string[];
  /** Outputs not compared: the parameter vector is read back after the step copied its update in. */
  readonly skip: readonly string[];
}

const pick = <T>(r: Rng, xs: readonly T[]): T => xs[r.int(0, xs.length)];
/** Seeds next to each other give unrelated streams (xorshift from a small seed warms up slowly). */
const mix = (seed: number) => Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ (seed >>> 13);

export function fuzzGraph(seed: number): FuzzGraph {
  const r = seededRandom(mix(seed));
  const flavor: Flavor = pick(r, ["f32", "f32", "f32", "f16", "mixed", "mixed"]);
  // An f16-typed graph has no optimizer: the flat vectors concatenate f32 padding with the parameters.
  const mode: Mode = flavor === "f16"
    ? pick(r, ["forward", "grad"])
    : pick(r, ["forward", "forward", "grad", "grad", "train"]);
  // Few distinct shapes, so that kernels repeat across graphs and a batch needs fewer distinct
  // pipelines (the cost that dominates on lavapipe and g++); 5 keeps rows that are no multiple of 4.
  const shape = [r.int(1, 3), pick(r, [3, 4, 8]), pick(r, [4, 5, 8, 16])] as const;
  const m = new ModelBuilder(`fuzz-${seed}`);
  const c: Ctx = {
    m,
    r,
    dt: flavor === "f16" ? "f16" : "f32",
    shape,
    learn: mode !== "forward",
    feeds: new Map(),
    sides: [],
    count: 0,
  };
  const pool: Tensor[] = [leaf(c, "x", shape), leaf(c, "y", shape)];
  const names = Object.keys(BLOCKS);
  const blocks: string[] = [];
  for (let i = r.int(1, 5); i > 0; i--) {
    const name = pick(r, names);
    blocks.push(name);
    const x = pool[pool.length - 1 - r.int(0, Math.min(2, pool.length))];
    // A second operand other than x: x > x or x - x would only test ties.
    const others = pool.filter((t) => t !== x);
    pool.push(BLOCKS[name](c, x, pick(r, others)));
  }
  const out = pool[pool.length - 1];
  m.output("out", out);
  m.output("mid", pool[r.int(2, pool.length)]);
  c.sides.slice(0, 2).forEach((t, i) => m.output(`side${i}`, t));

  let optimizer: OptimizerKind | undefined;
  let g = m.graph;
  if (mode !== "forward") {
    m.output("loss", lossOf(c, out));
    if (mode === "grad") g = differentiate(g, "loss");
    else {
      optimizer = pick(r, ["lamb", "adamw"] as const);
      g = differentiate(g, appendScaledLoss(g, "loss"));
      g = appendOptimizer(g, flatLayoutOf(g), { kind: optimizer, dynamicScale: r.uniform() < 0.5 });
    }
  }
  if (flavor === "mixed") g = applyPrecision(g, "fp16");
  const feeds = feedsOf(g, c.feeds, r);
  if (mode === "train") Object.assign(feeds, trainFeeds(g, r, flavor === "mixed" ? 1024 : 1));
  const skip = mode === "train" ? [OPT.flatParams] : [];
  return { seed, graph: g, feeds, flavor, mode, optimizer, blocks, skip };
}

/** A scalar loss of the last value: a mean square, a weighted sum, or cross-entropy over its rows. */
function lossOf(c: Ctx, out: Tensor): Tensor {
  const [b, s, h] = c.shape;
  switch (c.r.int(0, 3)) {
    case 0:
      return out.square().mean([0, 1, 2], false).mul(0.5);
    case 1: {
      const name = `cot${c.count++}`;
      c.feeds.set(name, { kind: "normal", scale: 1 });
      return out.mul(c.m.input(name, c.dt, [b, s, h])).mean([0, 1, 2], false);
    }
    default: {
      const name = `labels${c.count++}`;
      c.feeds.set(name, { kind: "int", below: h, ignore: -1 });
      return crossEntropy(out.reshape([b * s, h]), c.m.input(name, "i32", [b * s])).loss;
    }
  }
}

/** Values for every input and parameter, exact in the node's dtype. */
function feedsOf(g: Graph, rules: Map<string, FeedRule>, r: Rng): Record<string, Float64Array> {
  const feeds: Record<string, Float64Array> = {};
  for (const n of g.nodes) {
    if (n.op !== "input" && n.op !== "param") continue;
    const name = String(n.attrs.name);
    const rule = rules.get(name);
    if (!rule) continue; // the optimizer's own inputs (trainFeeds)
    const size = n.type.shape.reduce((a, d) => a * d, 1);
    const exact = n.type.dtype === "f16" ? roundF16 : Math.fround;
    feeds[name] = Float64Array.from({ length: size }, (_, i) => {
      switch (rule.kind) {
        case "normal":
          return exact(rule.scale * r.normal());
        case "int":
          return rule.ignore !== undefined && r.uniform() < 0.2 ? rule.ignore : r.int(0, rule.below);
        case "key":
          return i === 0 ? r.u32() : r.int(0, 100);
        case "mask": {
          // Any key but the first of a row may be masked, so no row is masked entirely.
          return i % rule.seq > 0 && r.uniform() < 0.3 ? -10000 : 0;
        }
      }
    });
  }
  return feeds;
}

/** The optimizer's inputs mid-run: step 6 of 20, moments of either sign, a power-of-two loss scale. */
function trainFeeds(g: Graph, r: Rng, lossScale: number): Record<string, Float64Array> {
  const layout = flatLayoutOf(g);
  const base = optimizerFeeds(layout, { base: 0.01, warmupProportion: 0.2, totalSteps: 20 }, {
    step: 6,
    lossScale,
    cleanSteps: 3,
  });
  const feeds = Object.fromEntries(Object.entries(base).map(([k, v]) => [k, Float64Array.from(v)]));
  for (const s of layout.segments) {
    for (let i = s.offset; i < s.offset + s.size; i++) {
      feeds[OPT.m][i] = Math.fround(1e-3 * r.normal());
      feeds[OPT.v][i] = Math.fround(1e-6 * Math.abs(r.normal()) + 1e-8);
    }
  }
  return feeds;
}
