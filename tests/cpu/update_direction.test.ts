/**
 * The update direction rule of the storage policy (compiler/storage/storage_precision.ts): in fp16 and bf16
 * training, LAMB's direction `u`, materialized between the pass that computes it (with ||u||) and the pass
 * that applies it, is stored in the low precision; the weights, moments and norms stay f32. Then a LAMB step
 * on the CPU backend on fresh random weights, moments and gradients against the reference interpreter:
 * the round-trip graph (which rounds u where the plan does) matches the step elementwise, while the graph
 * with u unrounded does not — so the check sees u's rounding, and the reference models it.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { fixtureStep } from "../util/bert_steps.ts";
import { optimizerFeeds } from "../../optimizer/feeds.ts";
import { flatLayoutOf } from "../../optimizer/flat_layout.ts";
import { appendOptimizer, OPT } from "../../optimizer/update.ts";
import { applyPrecision, LOW_DTYPE } from "../../compiler/training_graph/mixed_precision.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { descentSteps, roundTripGraph, type StoragePlan } from "../../compiler/storage/storage_precision.ts";
import { CPU } from "../../engine/backends.ts";
import { Graph, type NodeId } from "../../ir/mod.ts";
import { ModelBuilder, type Tensor } from "../../dsl/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { seededRandom } from "../../cases/random.ts";
import { testCpu } from "../util/cpu_check.ts";

const cpu = await testCpu();

/** The materialized update directions: the operands of descent steps' products that live in buffers. */
function directions(g: Graph, materialized: ReadonlySet<NodeId>): NodeId[] {
  return [...descentSteps(g).values()].flatMap((mul) =>
    g.nodes[mul].inputs.filter((i) => materialized.has(i))
  );
}

Deno.test("update direction: only the scaled step of a descent written back over its state narrows", () => {
  // t is materialized (read by a column sum too) and feeds an output elementwise: as the direction of
  // `new:p = p − 0.1·tᵀ` it narrows; as a plain output, an ascent or an unscaled step it stays f32.
  const build = (name: string, step: (p: Tensor, t: Tensor) => Tensor) => {
    const m = new ModelBuilder("t");
    const x = m.input("x", "f32", [64, 48]);
    const t = x.exp().mul(x.sum(-1)).tanh();
    const p = m.param("p", [48, 64], "zeros");
    m.output(name, step(p, t.transpose()));
    m.output("s", t.mul(t).sum(0));
    const c = compileGraph(applyPrecision(m.graph, "fp16"), {
      fuse: true,
      target: target("c"),
      precision: "fp16",
    });
    const ts = [...c.fusion.materialized].filter((id) => c.graph.nodes[id].op === "tanh");
    assert.equal(ts.length, 1, "t is materialized");
    return c.storage.storedType(ts[0]);
  };
  assert.equal(build("new:p", (p, t) => p.sub(t.mul(0.1))), "f16");
  assert.equal(build("new:p", (p, t) => p.sub(t.mul(0.1).mul(2))), "f16");
  assert.equal(build("out", (p, t) => p.sub(t.mul(0.1))), "f32");
  assert.equal(build("new:p", (p, t) => p.add(t.mul(0.1))), "f32");
  assert.equal(build("new:p", (p, t) => p.sub(t)), "f32");
  // Read by the output also otherwise than through the step: the output is as precise as t.
  assert.equal(build("new:p", (p, t) => p.sub(t.mul(0.1)).add(t)), "f32");
});

for (const precision of ["fp16", "bf16"] as const) {
  Deno.test(`update direction: a BERT training step (${precision}) stores LAMB's u ${precision}, the rest f32`, () => {
    const g = fixtureStep(precision, [2, 8, 3]);
    const c = compileGraph(g, { fuse: true, target: target("c") });
    const low = LOW_DTYPE[precision];
    const u = directions(c.graph, c.fusion.materialized);
    assert.equal(u.length, 1, "one direction, between LAMB's two passes");
    assert.equal(c.storage.storedType(u[0]), low);
    const buffer = c.plan.buffers.find((b) => b.name.startsWith(`%${u[0]} `))!;
    assert.equal(buffer.dtype, low);
    // Written by one kernel (the one that takes ||u||), read as stored by another (the one applying it).
    const binds = c.kernels.flatMap((k) => k.bindings.filter((b) => b.buffer === buffer.id));
    assert.deepEqual(binds.map((b) => [b.access, b.t]).sort(), [["read", low], ["write", low]]);
    // The step's state stays f32: weights, moments, loss-scaling state.
    const P = c.graph.nodes[u[0]].type.shape[0];
    for (const [name, id] of c.graph.outputs) {
      if (!name.startsWith("low:") && !name.startsWith("new:low:")) {
        assert.equal(c.storage.storedType(id), "f32", name);
      }
    }
    for (const id of c.storage.narrowed) {
      if (id !== u[0]) assert.notEqual(c.graph.nodes[id].type.shape.join(), String(P), `%${id} narrowed`);
    }
    // fp32 narrows nothing, u included.
    assert.equal(
      compileGraph(g, { fuse: true, target: target("c"), precision: "fp32" }).storage.narrowed.size,
      0,
    );
  });
}

const SHAPES: Record<string, number[]> = {
  "bert.encoder.layer.0.attention.self.query.weight": [48, 40],
  "bert.encoder.layer.0.attention.self.query.bias": [40],
  "bert.encoder.layer.0.output.LayerNorm.weight": [40],
  "cls.predictions.transform.dense.weight": [40, 64],
};

/** The optimizer over gradients fed as inputs, plus one GEMM (so the graph is mixed precision). */
function lambGraph(precision: "fp16" | "bf16"): Graph {
  const g = new Graph("lamb-only");
  for (const [name, shape] of Object.entries(SHAPES)) {
    g.add("param", [], { name, init: "zeros" }, { shape, dtype: "f32" });
    g.setOutput(`grad.${name}`, g.add("input", [], { name: `g:${name}` }, { shape, dtype: "f32" }));
  }
  const x = g.add("input", [], { name: "x" }, { shape: [8, 48], dtype: "f32" });
  const w = g.sources("param").get("bert.encoder.layer.0.attention.self.query.weight")!.id;
  g.setOutput(
    "y",
    g.add("matmul", [x, w], { transpose_a: false, transpose_b: false }, { shape: [8, 40], dtype: "f32" }),
  );
  appendOptimizer(g, flatLayoutOf(g), { kind: "lamb", dynamicScale: true });
  return applyPrecision(g, precision);
}

/** Fraction of elements where a and b differ by more than 1e-6 relative (plus 1e-6 of the largest). */
function differing(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let scale = 0, n = 0;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]));
  for (let i = 0; i < b.length; i++) if (Math.abs(a[i] - b[i]) > 1e-6 * (Math.abs(b[i]) + scale)) n++;
  return n / b.length;
}

for (const [precision, seed] of [["fp16", 5], ["bf16", 6]] as const) {
  Deno.test({
    name:
      `update direction: a LAMB step (${precision}) on the CPU backend matches the reference that rounds u`,
    ignore: !cpu.ctx,
    fn: async () => {
      const g = lambGraph(precision);
      const r = seededRandom(seed);
      const feeds: Record<string, ArrayLike<number>> = { ...optimizerStepFeeds(g, r, 1024) };
      for (const [name, shape] of Object.entries(SHAPES)) {
        const n = shape.reduce((a, b) => a * b, 1);
        feeds[name] = Float32Array.from({ length: n }, () => 0.5 * r.normal());
        feeds[`g:${name}`] = Float32Array.from({ length: n }, () => 1024 * 0.3 * r.normal());
      }
      feeds.x = Float32Array.from({ length: 8 * 48 }, () => r.normal());
      const { executor, compiled } = await CPU.compile(cpu.ctx!, g, true);
      try {
        const s = compiled.storage;
        assert.equal(s.precision, precision);
        const u = directions(compiled.graph, compiled.fusion.materialized);
        assert.equal(u.length, 1);
        assert.ok(s.narrowed.has(u[0]), "u is stored low");
        const out = await executor.run(feeds);
        const asStored = evaluate(roundTripGraph(compiled.graph, compiled.fusion, s), feeds, {
          precision: "f32",
        });
        // The same plan with u kept f32: what the reference would say if it did not model u's rounding.
        const unrounded: StoragePlan = {
          ...s,
          narrowed: new Set([...s.narrowed].filter((id) => id !== u[0])),
          storedType: (id) => (id === u[0] ? "f32" : s.storedType(id)),
        };
        const exact = evaluate(roundTripGraph(compiled.graph, compiled.fusion, unrounded), feeds, {
          precision: "f32",
        });
        // The step each computes (the old flat vector is the reference's `flat.params`; the CPU backend's
        // buffer holds the new one after the step).
        const old = asStored.get(OPT.flatParams)!;
        const step = (w: ArrayLike<number>) => Float64Array.from(old, (o, i) => w[i] - o);
        const want = step(asStored.get(`new:${OPT.flatParams}`)!);
        const got = step(out[`new:${OPT.flatParams}`]);
        const without = step(exact.get(`new:${OPT.flatParams}`)!);
        assert.ok(want.some((d) => d !== 0), "the step moved the weights");
        // Rare flips where the backends' f32 sums differ in the last bit and u lies on a rounding boundary.
        assert.ok(differing(got, want) < 0.01, `step vs the round-trip reference: ${differing(got, want)}`);
        assert.ok(differing(without, want) > 0.5, `u's rounding is invisible: ${differing(without, want)}`);
        assert.ok(
          differing(got, without) > 0.5,
          `the CPU step is the unrounded one: ${differing(got, without)}`,
        );
        for (const name of [`new:${OPT.m}`, `new:${OPT.v}`, `new:${OPT.state}`]) {
          assert.ok(differing(out[name], asStored.get(name)!) === 0, name);
        }
      } finally {
        executor.destroy();
      }
    },
  });
}

Deno.test({
  name: "update direction: an unfused fp16 LAMB step from fresh moments keeps m̂ and v̂ f32 (small gradients)",
  ignore: !cpu.ctx,
  fn: async () => {
    // Unfused, every value of the optimizer is materialized. Only the step's factors may narrow: v̂ ≈ 1e-3·g²
    // of a 1e-5 gradient is far below f16's range, and stored low it was 0, so u = m̂/ε came out about 77
    // times too large (BERT's bias updates on the first step; seen on an H200, issue 24).
    const g = lambGraph("fp16");
    const r = seededRandom(8);
    const scale = 1024;
    const feeds: Record<string, ArrayLike<number>> = optimizerFeeds(
      flatLayoutOf(g),
      { base: 6e-3, warmupProportion: 0.1, totalSteps: 200 },
      { step: 0, lossScale: scale },
    );
    for (const [name, shape] of Object.entries(SHAPES)) {
      const n = shape.reduce((a, b) => a * b, 1);
      feeds[name] = Float32Array.from({ length: n }, () => 0.02 * r.normal());
      feeds[`g:${name}`] = Float32Array.from({ length: n }, () => scale * 1e-5 * r.normal());
    }
    feeds.x = Float32Array.from({ length: 8 * 48 }, () => r.normal());
    const { executor } = await CPU.compile(cpu.ctx!, g, false);
    try {
      const out = await executor.run(feeds);
      const ref = evaluate(g, feeds, { precision: "f32" });
      const old = ref.get(OPT.flatParams)!, want = ref.get(`new:${OPT.flatParams}`)!;
      const got = out[`new:${OPT.flatParams}`];
      for (const s of flatLayoutOf(g).segments) {
        let dd = 0, nn = 0;
        for (let i = s.offset; i < s.offset + s.size; i++) {
          dd += (got[i] - want[i]) ** 2;
          nn += (want[i] - old[i]) ** 2;
        }
        assert.ok(nn > 0, `${s.name} moved`);
        // u itself is stored f16 (one rounding, 2⁻¹¹ relative); before the fix biases were off by ~77×.
        assert.ok(Math.sqrt(dd / nn) < 0.01, `${s.name}: update off by ${Math.sqrt(dd / nn)} relative`);
      }
    } finally {
      executor.destroy();
    }
  },
});
