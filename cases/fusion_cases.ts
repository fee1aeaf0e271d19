/**
 * The fusion kinds, one small graph each: shared by the numeric tests (tests/webgpu/webgpu_fused.test.ts) and
 * the fused-vs-unfused benchmark (bench/fusion.ts), so both exercise the same kernels.
 */
import { differentiate } from "../compiler/training_graph/autodiff.ts";
import {
  crossEntropy,
  dropout,
  gelu,
  geluTanh,
  layerNorm,
  linear,
  ModelBuilder,
  softmax,
} from "../dsl/mod.ts";
import type { Tensor } from "../dsl/mod.ts";
import type { DType, Graph } from "../ir/mod.ts";

export interface Tolerance {
  rtol: number;
  atol: number;
}

/** Integer feed generators by input name (a random source and the element index). */
export type IntFeeds = Record<
  string,
  (r: { int(lo: number, hi: number): number; u32(): number }, i: number) => number
>;

/** Builds `body` into a graph; with `backward`, adds loss = sum(out * probe) and differentiates it. */
export function graphOf(
  name: string,
  body: (m: ModelBuilder, dtype: DType) => Tensor,
  dtype: DType,
  backward: boolean,
): Graph {
  const m = new ModelBuilder(name);
  const out = body(m, dtype);
  m.output("out", out);
  if (!backward) return m.graph;
  const probe = m.input("probe", out.dtype, out.shape);
  m.output("loss", out.cast("f32").mul(probe.cast("f32")).sum(out.shape.map((_, i) => i), false));
  return differentiate(m.graph, "loss");
}

export interface FusionCase {
  name: string;
  body: (m: ModelBuilder, dtype: DType) => Tensor;
  backward: boolean;
  dtypes: DType[];
  ints?: IntFeeds;
  /** Tolerance overrides per dtype (default: by storage type). */
  tol?: Partial<Record<DType, Tolerance>>;
}

/**
 * Self-attention of BERT's layout from given Q, K, V [b, s, heads·dh] (no projections): heads split by
 * reshape + permute, the `attention` op (scores scaled, the padding mask added, softmax, dropout when
 * `rng_key` is given, PV), heads merged back. Forward only, so the attention fusion applies.
 */
export function attentionForward(
  m: ModelBuilder,
  dt: DType,
  shape: { b: number; s: number; heads: number; dh: number },
  dropoutProb: number,
): Tensor {
  const { b, s, heads, dh } = shape;
  const split = (t: Tensor) => t.reshape([b, s, heads, dh]).permute([0, 2, 1, 3]);
  const q = split(m.input("q", dt, [b, s, heads * dh]));
  const k = split(m.input("k", dt, [b, s, heads * dh]));
  const v = split(m.input("v", dt, [b, s, heads * dh]));
  const mask = m.input("mask", "i32", [b, s]).cast(dt).sub(1).mul(10000).reshape([b, 1, 1, s]);
  const key = dropoutProb > 0 ? m.input("rng_key", "u32", [2]) : undefined;
  return m.attention(q, k, v, mask, 1 / Math.sqrt(dh), dropoutProb, key).permute([0, 2, 1, 3])
    .reshape([b, s, heads * dh]);
}

/** Sizes: small enough for lavapipe in CI; the benchmark scales them with `scale`. */
export let [B, S, H] = [2, 6, 32];
export function setCaseSizes(b: number, s: number, h: number): void {
  [B, S, H] = [b, s, h];
}

export const FUSION_CASES: FusionCase[] = [
  {
    name: "loop fusion: bias + GELU + residual chain through broadcasts",
    body: (m, dt) => {
      const x = m.input("x", dt, [B, S, H]);
      const bias = m.param("bias", [H], "zeros", dt);
      const y = gelu(x.add(bias)).mul(geluTanh(x)).sub(x.abs().neg().exp());
      return y.add(m.input("row", dt, [B, S, 1]));
    },
    backward: false,
    dtypes: ["f32", "f16"],
  },
  {
    name: "LayerNorm forward (scale and shift fused)",
    body: (m, dt) =>
      layerNorm(
        m.input("x", dt, [B, S, H]),
        m.param("g", [H], "ones", dt),
        m.param("b", [H], "zeros", dt),
        1e-5,
      ),
    backward: false,
    dtypes: ["f32", "f16"],
  },
  {
    name: "LayerNorm backward (row kernel for dx, column sums for dγ, dβ)",
    body: (m, dt) =>
      layerNorm(
        m.param("x", [B * S, H], "zeros", dt),
        m.param("g", [H], "ones", dt),
        m.param("b", [H], "zeros", dt),
        1e-5,
      ),
    backward: true,
    dtypes: ["f32", "f16"],
  },
  {
    name: "masked softmax + dropout, forward and backward",
    body: (m, dt) => {
      const scores = m.param("scores", [B, 2, S, S], "zeros", dt);
      const mask = m.input("mask", "i32", [B, S]).cast(dt).sub(1).mul(10000).reshape([B, 1, 1, S]);
      return dropout(softmax(scores, -1, mask), 0.25, m.input("rng_key", "u32", [2]));
    },
    backward: true,
    dtypes: ["f32", "f16"],
    ints: { mask: (_r, i) => (i % S < S - 2 ? 1 : 0), rng_key: (r) => r.u32() },
  },
  {
    name: "cross-entropy forward and backward (ignored labels)",
    body: (m, dt) => {
      const ce = crossEntropy(
        m.param("logits", [B * S, 4 * H], "zeros", dt),
        m.input("labels", "i32", [B * S]),
        -1,
      );
      return ce.loss.reshape([1]).add(ce.correct.reshape([1]));
    },
    backward: true,
    dtypes: ["f32", "f16"],
    ints: { labels: (r, i) => (i === 3 ? -1 : r.int(0, 4 * H)) },
  },
  {
    name: "GEMM epilogue: linear + bias + GELU + dropout + residual, forward and backward",
    body: (m, dt) => {
      const x = m.param("x", [B, S, H], "zeros", dt);
      const w = m.param("w", [H, H], "zeros", dt);
      const b = m.param("bias", [H], "zeros", dt);
      const y = dropout(gelu(linear(x, w, b)), 0.1, m.input("rng_key", "u32", [2]));
      return y.add(x);
    },
    backward: true,
    dtypes: ["f32", "f16"],
    ints: { rng_key: (r) => r.u32() },
  },
  {
    name: "GEMM with f16 operands and f32 accumulation",
    body: (m) => {
      const x = m.input("x", "f32", [B * S, H]).cast("f16");
      const w = m.param("w", [3 * H, H], "zeros").cast("f16");
      return x.matmul(w, { transposeB: true }).cast("f32").add(m.param("bias", [3 * H], "zeros"));
    },
    backward: false,
    dtypes: ["f32"],
    tol: { f32: { rtol: 4e-3, atol: 1e-3 } },
  },
  {
    name: "batched GEMMs through permutes (attention heads), forward and backward",
    body: (m, dt) => {
      const heads = (t: Tensor) => t.reshape([B, S, 2, H / 2]).permute([0, 2, 1, 3]);
      const q = heads(m.param("q", [B, S, H], "zeros", dt));
      const k = heads(m.param("k", [B, S, H], "zeros", dt));
      const v = heads(m.param("v", [B, S, H], "zeros", dt));
      const p = softmax(q.matmul(k, { transposeB: true }).mul(0.25), -1);
      return p.matmul(v).permute([0, 2, 1, 3]).reshape([B, S, H]);
    },
    backward: true,
    dtypes: ["f32", "f16"],
  },
  {
    name: "attention forward (flash-style, one kernel)",
    body: (m, dt) => attentionForward(m, dt, { b: B, s: S, heads: 2, dh: H / 2 }, 0.1),
    backward: false,
    dtypes: ["f32", "f16"],
    ints: { mask: (_r, i) => (i % S < S - 2 ? 1 : 0), rng_key: (r) => r.u32() },
  },
  {
    name: "embedding gather + LayerNorm, and the scatter-add of its backward",
    body: (m, dt) => {
      const table = m.param("table", [40, H], "zeros", dt);
      const ids = m.input("ids", "i32", [B, S]);
      return layerNorm(
        table.gather(ids),
        m.param("g", [H], "ones", dt),
        m.param("b", [H], "zeros", dt),
        1e-5,
      );
    },
    backward: true,
    dtypes: ["f32", "f16"],
    ints: { ids: (r) => r.int(0, 40) },
  },
];
