/**
 * The fuzzer's building blocks: each takes tensors of the graph's working shape [B, S, H] and returns one
 * of the same shape, so blocks compose in any order. Together they cover what BERT is made of and more:
 * elementwise math with its conditioning kept moderate (so bounds stay meaningful), broadcasts from
 * every subset of axes, reductions over every subset of axes, GEMMs (transposed, batched, with bias),
 * multi-head attention with a mask and dropout, LayerNorm, softmax over any axis, dropout, permutes,
 * slices, pads, concats and gathers.
 */
import {
  dropout,
  gelu,
  geluTanh,
  layerNorm,
  linear,
  type ModelBuilder,
  selfAttention,
  softmax,
  type Tensor,
} from "../../dsl/mod.ts";
import type { DType } from "../../ir/mod.ts";
import type { Rng } from "../random.ts";

/** How a fed value is drawn: normals times a scale, integers in [0, n), an attention mask, a key. */
export type FeedRule =
  | { kind: "normal"; scale: number }
  | { kind: "int"; below: number; ignore?: number }
  | { kind: "mask"; seq: number }
  | { kind: "key" };

/** The state blocks build in: one builder, one random stream, the working shape and dtype. */
export interface Ctx {
  readonly m: ModelBuilder;
  readonly r: Rng;
  readonly dt: DType;
  readonly shape: readonly [number, number, number];
  /** Weights are parameters (differentiated) rather than inputs. */
  readonly learn: boolean;
  readonly feeds: Map<string, FeedRule>;
  /** Extra outputs a block wants checked (reductions, before they are broadcast back). */
  readonly sides: Tensor[];
  key?: Tensor;
  count: number;
}

/** A fed tensor: a parameter when the graph learns, else an input. */
export function leaf(c: Ctx, what: string, shape: readonly number[], scale = 1): Tensor {
  const name = `${what}${c.count++}`;
  c.feeds.set(name, { kind: "normal", scale });
  return c.learn ? c.m.param(name, shape, "zeros", c.dt) : c.m.input(name, c.dt, shape);
}

function input(c: Ctx, what: string, dtype: DType, shape: readonly number[], rule: FeedRule): Tensor {
  const name = `${what}${c.count++}`;
  c.feeds.set(name, rule);
  return c.m.input(name, dtype, shape);
}

function keyOf(c: Ctx): Tensor {
  c.key ??= input(c, "key", "u32", [2], { kind: "key" });
  return c.key;
}

const pick = <T>(r: Rng, xs: readonly T[]): T => xs[r.int(0, xs.length)];

/** A random non-empty subset of the axes 0..rank-1, increasing. */
export function someAxes(r: Rng, rank: number): number[] {
  for (;;) {
    const axes = [...Array(rank).keys()].filter(() => r.uniform() < 0.5);
    if (axes.length > 0) return axes;
  }
}

export type Block = (c: Ctx, x: Tensor, y: Tensor) => Tensor;

/** Functions with bounded condition on N(0,1)-sized operands (no log of 0, no division near 0). */
const UNARY: ((x: Tensor) => Tensor)[] = [
  (x) => x.tanh(),
  (x) => gelu(x),
  (x) => geluTanh(x),
  (x) => x.neg().exp().add(1).reciprocal(), // sigmoid
  (x) => x.square().neg().exp(),
  (x) => x.square().add(1).sqrt(),
  (x) => x.abs().add(1).log(),
  (x) => x.square().add(0.5).rsqrt(),
  (x) => x.div(x.abs().add(1)),
  (x) => x.maximum(0),
  (x) => x.mul(0.5).exp().mul(0.5),
];

export const BLOCKS: Record<string, Block> = {
  unary: (c, x) => pick(c.r, UNARY)(x),

  /** y is a fresh tensor over a random subset of the axes (size 1 elsewhere, or dropped from the left). */
  broadcast: (c, x) => {
    const [b, s, h] = c.shape;
    const keep = c.r.int(0, 8);
    let shape = [b, s, h].map((d, i) => (keep >> i) & 1 ? d : 1);
    if (c.r.uniform() < 0.3) shape = shape.slice(c.r.int(1, 3));
    const y = leaf(c, "bc", shape, 0.5);
    switch (c.r.int(0, 6)) {
      case 0:
        return x.add(y);
      case 1:
        return x.sub(y);
      case 2:
        return x.mul(y.tanh().add(1));
      case 3:
        return x.maximum(y);
      case 4:
        return x.div(y.square().add(1));
      default:
        return c.m.where(x.gt(y), x, y.mul(0.5));
    }
  },

  /** A reduction over a random subset of axes, checked itself and broadcast back. */
  reduce: (c, x) => {
    const axes = someAxes(c.r, 3);
    switch (c.r.int(0, 4)) {
      case 0: {
        const mean = x.mean(axes);
        c.sides.push(mean);
        return x.sub(mean);
      }
      case 1: {
        const ms = x.square().mean(axes);
        c.sides.push(ms);
        return x.mul(ms.add(1).rsqrt());
      }
      case 2: {
        const mx = x.max(axes);
        c.sides.push(mx.reshape([-1]));
        return x.sub(mx.stopGradient()).exp();
      }
      default:
        return softmaxOver(x, axes);
    }
  },

  softmax: (c, x) => softmax(x, c.r.int(0, 3)),

  layernorm: (c, x) => {
    const h = c.shape[2];
    return layerNorm(x, leaf(c, "gamma", [h], 1), leaf(c, "beta", [h], 0.5), 1e-5);
  },

  /** A linear layer, its weight stored [out, in] (as BERT) or [in, out]. */
  linear: (c, x) => {
    const h = c.shape[2];
    const w = leaf(c, "w", [h, h], 1 / Math.sqrt(h));
    const bias = c.r.uniform() < 0.7 ? leaf(c, "bias", [h], 0.5) : undefined;
    if (c.r.uniform() < 0.5) return linear(x, w, bias);
    const y = x.reshape([-1, h]).matmul(w);
    return (bias ? y.add(bias) : y).reshape(c.shape);
  },

  /** Batched GEMMs through transposed operands: (x yᵀ) z or x (xᵀ y) / S. */
  bmm: (c, x, y) => {
    const [, s, h] = c.shape;
    if (c.r.uniform() < 0.5) return x.matmul(y, { transposeB: true }).mul(1 / h).matmul(y.tanh());
    return x.matmul(x.matmul(y, { transposeA: true }).mul(1 / s)).tanh();
  },

  attention: (c, x) => {
    const [b, s, h] = c.shape;
    const heads = pick(c.r, [1, 2, 4].filter((n) => h % n === 0));
    const lin = () => ({ weight: leaf(c, "w", [h, h], 1 / Math.sqrt(h)), bias: leaf(c, "bias", [h], 0.2) });
    const mask = input(c, "mask", c.dt, [b, 1, 1, s], { kind: "mask", seq: s });
    const p = c.r.uniform() < 0.5 ? pick(c.r, [0.1, 0.25, 0.5]) : 0;
    const w = { query: lin(), key: lin(), value: lin() };
    return selfAttention(x, w, heads, mask, p, p > 0 ? keyOf(c) : undefined);
  },

  dropout: (c, x) => dropout(x, pick(c.r, [0.1, 0.2, 0.5]), keyOf(c)),

  /** Permute, combine with another tensor in that layout, permute back. */
  permute: (c, x, y) => {
    const perm = pick(c.r, [[0, 2, 1], [1, 0, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1]]);
    const inv = perm.map((_, i) => perm.indexOf(i));
    return x.permute(perm).mul(y.permute(perm).tanh()).permute(inv).add(x.mul(0.5));
  },

  /** Halves of two tensors joined along an axis, or a slice padded back with zeros. */
  splice: (c, x, y) => {
    const axis = c.r.int(0, 3);
    const d = c.shape[axis];
    if (d < 2) return x.add(y).mul(0.5);
    const k = c.r.int(1, d);
    if (c.r.uniform() < 0.5) return c.m.concat([x.slice(axis, 0, k), y.slice(axis, k, d)], axis);
    const low = [0, 0, 0], high = [0, 0, 0];
    low[axis] = k;
    return x.slice(axis, k, d).pad(low, high).add(y.mul(0.5));
  },

  /** Rows of a table picked by integer ids (an embedding), added on. */
  gather: (c, x) => {
    const [b, s, h] = c.shape;
    const rows = c.r.int(2, 9);
    const ids = input(c, "ids", "i32", [b, s], { kind: "int", below: rows });
    return x.add(leaf(c, "table", [rows, h], 0.5).gather(ids));
  },

  where: (c, x, y) => c.m.where(x.gt(y), x.mul(y.tanh()), y.sub(x).mul(0.5)),
};

/** Softmax over several axes at once: the reductions the DSL's one-axis softmax never makes. */
function softmaxOver(x: Tensor, axes: number[]): Tensor {
  const e = x.sub(x.max(axes).stopGradient()).exp();
  return e.div(e.sum(axes));
}
