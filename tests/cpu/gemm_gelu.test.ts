/**
 * The exact recognizers of the tanh-form GELU and its gradient (compiler/lower/gemm_gelu.ts), which decide
 * where cuBLASLt's GELU epilogues (tanh form only) may replace our kernels: the DSL's geluTanh and its
 * autodiff backward match in any graph that has them (a BERT LAMB step with hidden_act gelu_new included);
 * the erf GELU never does; and chains that are near misses of the tanh form (a constant off, one operand
 * replaced, a rounding in the middle, a derivative with a term changed) do not.
 */
import assert from "node:assert/strict";
import { graphOf } from "../../cases/fusion_cases.ts";
import { isTanhGelu, tanhGeluGradient, tanhGeluInput } from "../../compiler/lower/gemm_gelu.ts";
import { gelu, geluTanh, type ModelBuilder, type Tensor } from "../../dsl/mod.ts";
import type { Graph, NodeId } from "../../ir/mod.ts";
import { defineBert } from "../../models/bert.ts";
import { lambStep } from "../util/bert_steps.ts";

/** A linear layer [4, 8]·[8, 6] + bias, then `act`, forward and backward; `pre` is the bias add. */
function linearAct(act: (x: Tensor, m: ModelBuilder) => Tensor): { g: Graph; pre: NodeId; out: NodeId } {
  let pre = -1;
  const g = graphOf(
    "linear act",
    (m, dt) => {
      const x = m.param("x", [4, 8], "zeros", dt).matmul(m.param("w", [8, 6], "zeros", dt))
        .add(m.param("b", [6], "zeros", dt).broadcastTo([4, 6]));
      pre = x.id;
      return act(x, m);
    },
    "f32",
    true,
  );
  return { g, pre, out: g.outputs.get("out")! };
}

/** Every node that tanhGeluGradient accepts for `pre`, with its D. */
const gradients = (g: Graph, pre: NodeId) =>
  g.nodes.flatMap((n) => {
    const d = tanhGeluGradient(g, n.id, pre);
    return d === undefined ? [] : [[n.id, d] as const];
  });

Deno.test("geluTanh and its autodiff backward are recognized exactly, at the bias add", () => {
  const { g, pre, out } = linearAct((x) => geluTanh(x));
  assert.equal(tanhGeluInput(g, out), pre);
  assert.ok(isTanhGelu(g, out, pre));
  const found = gradients(g, pre);
  assert.equal(found.length, 1, "one node is D·GELU'(P)");
  // The gradient node is what the backward GEMMs read (dX = dP·Wᵀ), and D is the gradient reaching the
  // activation (here the loss's probe).
  const [grad, d] = found[0];
  assert.ok(g.nodes.some((n) => n.op === "matmul" && n.inputs.includes(grad)));
  assert.equal(g.nodes[d].op, "input");
});

Deno.test("the erf GELU never matches, forward or backward", () => {
  const { g, pre, out } = linearAct((x) => gelu(x));
  assert.equal(tanhGeluInput(g, out), undefined);
  assert.ok(!isTanhGelu(g, out, pre));
  assert.deepEqual(gradients(g, pre), []);
});

/** 0.5·x·(1 + tanh(k·(x + a·x³))) with its pieces replaceable, for near misses. */
function tanhForm(
  x: Tensor,
  o: { a?: number; k?: number; half?: number; cube?: Tensor; outer?: Tensor; round?: boolean } = {},
): Tensor {
  const cube = o.cube ?? x.mul(x).mul(x);
  let inner = x.add(cube.mul(o.a ?? 0.044715)).mul(o.k ?? Math.sqrt(2 / Math.PI));
  if (o.round) inner = inner.cast("f16").cast("f32");
  return (o.outer ?? x).mul(o.half ?? 0.5).mul(inner.tanh().add(1));
}

Deno.test("near misses of the tanh form do not match (forward and backward)", () => {
  const cases: Record<string, (x: Tensor, m: ModelBuilder) => Tensor> = {
    "the exact form, built by hand (the control)": (x) => tanhForm(x),
    "cubic coefficient 0.0447": (x) => tanhForm(x, { a: 0.0447 }),
    "scale 0.79788 for sqrt(2/pi)": (x) => tanhForm(x, { k: 0.79788 }),
    "0.49 for 1/2": (x) => tanhForm(x, { half: 0.49 }),
    "x^2 * y for x^3": (x, m) => tanhForm(x, { cube: x.mul(x).mul(m.param("y", [4, 6], "zeros", "f32")) }),
    "another tensor outside the tanh": (x, m) =>
      tanhForm(x, { outer: x.add(m.param("y", [4, 6], "zeros", "f32")) }),
    "the tanh argument rounded to f16": (x) => tanhForm(x, { round: true }),
    "x * (1 + tanh(0.851 x)) / 2, the sigmoid form": (x) => x.mul(x.mul(0.851).tanh().add(1)).mul(0.5),
  };
  for (const [name, act] of Object.entries(cases)) {
    const { g, pre, out } = linearAct(act);
    const control = name.startsWith("the exact form");
    assert.equal(isTanhGelu(g, out, pre), control, name);
    assert.equal(tanhGeluInput(g, out), control ? pre : undefined, name);
    assert.equal(gradients(g, pre).length, control ? 1 : 0, `${name} (backward)`);
  }
});

Deno.test("a derivative with one term changed is not the GELU gradient", () => {
  // d·GELU'(x) spelled by hand: 0.5(1+t) + 0.5·x·(1 − t²)·c·(1 + 3a·x²), then with one piece off.
  const c = Math.sqrt(2 / Math.PI), a = 0.044715;
  const spelled = (three: number, minusOne: number) => (x: Tensor, m: ModelBuilder) => {
    const t = x.add(x.mul(x).mul(x).mul(a)).mul(c).tanh();
    const d = m.param("d", [4, 6], "zeros", "f32");
    const sech2 = t.mul(t).mul(minusOne).add(1);
    const slope = x.mul(x).mul(three * a).add(1).mul(c);
    return d.mul(t.add(1).mul(0.5).add(x.mul(0.5).mul(sech2).mul(slope)));
  };
  for (const [three, minusOne, ok] of [[3, -1, true], [2, -1, false], [3, 1, false]] as const) {
    const { g, pre, out } = linearAct(spelled(three, minusOne));
    const d = tanhGeluGradient(g, out, pre);
    assert.equal(d !== undefined, ok, `3a -> ${three}a, 1 - t^2 -> 1 + ${minusOne}t^2`);
  }
});

for (const [act, layers] of [["gelu_new", 2], ["gelu", 0]] as const) {
  Deno.test(`a BERT LAMB fp16 step with hidden_act ${act}: ${layers} FFN activations and gradients match`, () => {
    const model = defineBert("gelu-recognizer", {
      vocab_size: 99,
      hidden_size: 128,
      num_hidden_layers: 2,
      num_attention_heads: 2,
      intermediate_size: 96,
      hidden_act: act,
      hidden_dropout_prob: 0.1,
      attention_probs_dropout_prob: 0.1,
      max_position_embeddings: 64,
      type_vocab_size: 2,
      initializer_range: 0.02,
      layer_norm_eps: 1e-12,
      num_labels: 2,
    });
    const g = lambStep(model, "fp16", [2, 16, 4], true);
    // The FFN's activations: over [batch, seq, intermediate] (the MLM head's transform also uses hidden_act).
    const ffn = g.nodes.filter((n) => n.type.shape.join() === "2,16,96" && n.type.dtype === "f32");
    const pres = ffn.flatMap((n) => {
      const p = tanhGeluInput(g, n.id);
      return p === undefined ? [] : [p];
    });
    assert.equal(pres.length, layers);
    for (const p of pres) assert.equal(gradients(g, p).length, 1, `the gradient at pre-activation %${p}`);
  });
}
