/**
 * compiler/passes/decompose.ts: a graph through the `attention` op decomposes, node for node, to the graph
 * dsl/nn.ts's softmax and dropout build (forward, autodiff's backward, fp16 casts, dropout streams), and the
 * interpreter's own attention (numeric/reference_attention.ts) computes what those primitives compute.
 */
import assert from "node:assert/strict";
import { decomposeComposites } from "../../compiler/passes/decompose.ts";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { applyPrecision, type Precision } from "../../compiler/training_graph/mixed_precision.ts";
import { dropout, ModelBuilder, softmax } from "../../dsl/mod.ts";
import type { Graph } from "../../ir/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";

const [Q, K, V, MASK, R] = [[2, 2, 4, 3], [2, 2, 5, 3], [2, 2, 5, 6], [2, 1, 1, 5], [2, 2, 4, 6]];

/** out = dropout(attention(q, k, v) over the op or its primitives, 0.2), and loss = sum(out * R). */
function step(viaOp: boolean, p: number, train: boolean, precision: Precision): Graph {
  const m = new ModelBuilder("attention");
  const [q, k, v] = [Q, K, V].map((s, i) => m.param(`w${i}`, s, "zeros"));
  const mask = m.input("mask", "f32", MASK), key = p > 0 ? m.input("key", "u32", [2]) : undefined;
  const att = viaOp
    ? m.attention(q, k, v, mask, 0.4, p, key)
    : dropout(softmax(q.matmul(k, { transposeB: true }).mul(0.4), -1, mask), p, key).matmul(v);
  const out = dropout(att, 0.2, key);
  m.output("out", out);
  m.output("loss", out.mul(m.input("R", "f32", R)).sum([0, 1, 2, 3], false));
  return applyPrecision(train ? differentiate(m.graph, "loss") : m.graph, precision);
}

Deno.test("decompose: attention becomes the DSL's primitives, node for node, forward and backward", () => {
  const cases = [0, 0.3].flatMap((p) =>
    [false, true].flatMap((train) => ["fp32", "fp16"].map((prec) => ({ p, train, prec: prec as Precision })))
  );
  for (const { p, train, prec } of cases) {
    const viaOp = step(true, p, train, prec), primitives = step(false, p, train, prec);
    assert.ok(viaOp.nodes.some((n) => n.op === (train ? "attention_grad" : "attention")));
    const decomposed = decomposeComposites(viaOp), what = `dropout ${p} ${train ? "train" : "infer"} ${prec}`;
    assert.equal(JSON.stringify(decomposed.nodes), JSON.stringify(primitives.nodes), what);
    assert.deepEqual([...decomposed.outputs], [...primitives.outputs], what);
    assert.equal(decomposed.precision, prec);
  }
});

Deno.test("decompose: the interpreter's own attention and its gradients equal the primitives' (f64)", () => {
  const rand = (n: number, k: number) => Array.from({ length: n }, () => k * (2 * Math.random() - 1));
  for (const [p, prec, tol] of [[0, "fp32", 1e-12], [0.3, "fp32", 1e-12], [0.3, "fp16", 1e-5]] as const) {
    const g = step(true, p, true, prec), outputs = ["out", "grad.w0", "grad.w1", "grad.w2"];
    // Masked (padding) keys as BERT masks them, beside ordinary ones.
    const mask = rand(10, 1).map((u) => (u < -0.4 ? -10000 : 0)), key = [Math.random() * 2 ** 32 >>> 0, 7];
    const feeds = { w0: rand(48, 2), w1: rand(60, 2), w2: rand(120, 1), mask, R: rand(96, 1), key };
    const native = evaluate(g, feeds, { outputs }),
      primitives = evaluate(decomposeComposites(g), feeds, { outputs });
    for (const name of outputs) {
      const a = native.get(name)!, b = primitives.get(name)!;
      const err = Math.max(...a.map((x, i) => Math.abs(x - b[i])));
      assert.ok(
        err < tol && a.some((x) => x !== 0),
        `${name}, dropout ${p}, ${prec}: |native - primitives| ${err}`,
      );
    }
  }
});
