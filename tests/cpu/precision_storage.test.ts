/**
 * The storage half of the mixed-precision policy (compiler/storage/storage_precision.ts) without a device: which
 * materialized values are narrowed to f16 and which stay f32 and why, on small graphs; how the plan and
 * the lowered kernels honour it; and the round-trip graph the reference interpreter runs.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { type Compiled, compileGraph } from "../../compiler/driver/compile.ts";
import type { Kernel, KExpr } from "../../compiler/kernel_ir/ir.ts";
import { visitExprs } from "../../compiler/kernel_ir/walk.ts";
import { emitWGSL } from "../../compiler/codegen/wgsl.ts";
import { applyPrecision } from "../../compiler/training_graph/mixed_precision.ts";
import { type KeepReason, roundTripGraph } from "../../compiler/storage/storage_precision.ts";
import { gelu, layerNorm, ModelBuilder, type Tensor } from "../../dsl/mod.ts";
import type { Graph, NodeId } from "../../ir/mod.ts";
import { runPipeline } from "../../compiler/pipeline/stage_runner.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { randomFeeds } from "../../cases/random_feeds.ts";

const compile = (g: Graph, precision: "fp32" | "fp16" = "fp16"): Compiled =>
  compileGraph(g, { fuse: true, target: target("wgsl"), precision });
/** Compiled in the precision the graph carries (none passed). */
const compileAsPrepared = (g: Graph): Compiled => compileGraph(g, { fuse: true, target: target("wgsl") });

/** A graph of `body`'s outputs, with the GEMMs put on f16 operands. */
function mixed(body: (m: ModelBuilder) => Record<string, Tensor>): Graph {
  const m = new ModelBuilder("t");
  for (const [name, t] of Object.entries(body(m))) m.output(name, t);
  return applyPrecision(m.graph, "fp16");
}

/** The materialized nodes of op `op` with the storage decision for each. */
function decisions(c: Compiled, op: string): { id: NodeId; narrowed: boolean; kept?: KeepReason }[] {
  return [...c.fusion.materialized]
    .filter((id) => c.graph.nodes[id].op === op)
    .map((id) => ({ id, narrowed: c.storage.narrowed.has(id), kept: c.storage.kept.get(id) }));
}

/** x [16, 32] → GEMM → GELU → GEMM: the GELU'd activation is stored between two kernels. */
const mlp = () =>
  mixed((m) => {
    const x = m.input("x", "f32", [16, 32]);
    const h = gelu(x.matmul(m.param("w1", [32, 64], "zeros")).add(m.param("b1", [64], "zeros")));
    return { y: h.matmul(m.param("w2", [64, 32], "zeros")) };
  });

Deno.test("storage policy: an activation between kernels is narrowed, graph outputs stay f32", () => {
  const c = compile(mlp());
  assert.equal(c.storage.precision, "fp16");
  const narrowed = [...c.storage.narrowed].map((id) => c.graph.nodes[id]);
  assert.equal(narrowed.length, 1, "the GELU result, written by the first GEMM's epilogue");
  assert.equal(narrowed[0].type.dtype, "f32");
  assert.deepEqual(narrowed[0].type.shape, [16, 64]);
  assert.equal(c.storage.storedType(narrowed[0].id), "f16");
  const y = c.graph.outputs.get("y")!;
  assert.equal(c.storage.storedType(y), "f32");
  assert.equal(c.storage.kept.get(y), "graph output");
  // Inputs are never narrowed; parameters only where every use rounds them to f16 (both weights here,
  // read only by the GEMMs; the bias is added in f32).
  for (const n of c.graph.nodes) {
    if (n.op !== "input" && n.op !== "param") continue;
    const weight = n.op === "param" && n.type.shape.length === 2;
    assert.equal(c.storage.storedType(n.id), weight ? "f16" : n.type.dtype, String(n.attrs.name));
    assert.equal(c.storage.lowWeights.has(n.id), weight);
  }
});

Deno.test("storage policy: fp32 narrows nothing; the graph carries the precision applyPrecision chose", () => {
  const g = mlp();
  assert.equal(compile(g, "fp32").storage.narrowed.size, 0);
  assert.equal(g.precision, "fp16");
  assert.equal(compileAsPrepared(g).storage.precision, "fp16");
  const m = new ModelBuilder("f32");
  const x = m.input("x", "f32", [4, 8]);
  m.output("y", gelu(x.matmul(m.param("w", [8, 8], "zeros"))).matmul(m.param("w2", [8, 8], "zeros")));
  assert.equal(m.graph.precision, "fp32");
  assert.equal(compileAsPrepared(m.graph).storage.narrowed.size, 0);
  assert.equal(applyPrecision(m.graph, "bf16").precision, "bf16");
  // A graph its author typed f16 throughout is not mixed precision: its f32 results are deliberate.
  const h = new ModelBuilder("f16");
  const a = h.input("a", "f16", [4, 8]);
  h.output("y", a.matmul(h.param("w", [8, 8], "zeros", "f16")).cast("f32").sum(-1));
  assert.equal(h.graph.precision, "fp32");
});

Deno.test("every graph pass and stage keeps the precision; one that drops it is blamed by name", () => {
  // An fp16 graph through the whole pipeline, no precision passed: the plan's storage says fp16.
  const g = mixed((m) => ({ y: gelu(m.input("x", "f32", [4, 8]).matmul(m.param("w", [8, 8], "zeros"))) }));
  const c = compileAsPrepared(g);
  assert.deepEqual([c.graph.precision, c.storage.precision], ["fp16", "fp16"]);
  // A pass that rebuilds the graph without copying the precision (new Graph(name)) fails the run.
  const run = (x: Graph) => {
    const out = new (x.constructor as typeof Graph)(x.name);
    for (const n of x.nodes) out.add(n.op, n.inputs, n.attrs, n.type, n.loc);
    for (const [k, id] of x.outputs) out.setOutput(k, id);
    return out;
  };
  const dropping = { name: "drops-precision", run };
  assert.throws(() => runPipeline(g, [dropping]), /drops-precision.*precision from fp16 to fp32/);
});

Deno.test("storage policy: reduction results stay f32, the normalized activation narrows", () => {
  const g = (() => {
    const m = new ModelBuilder("ln");
    const x = m.input("x", "f32", [8, 32]);
    const y = layerNorm(x, m.param("g", [32], "ones"), m.param("b", [32], "zeros"), 1e-12);
    const probe = m.input("probe", "f32", [8, 32]);
    m.output("loss", y.matmul(m.param("w", [32, 32], "zeros")).mul(probe).sum([0, 1], false));
    return m.graph;
  })();
  const c = compile(applyPrecision(g, "fp16"));
  const reasons = new Set(c.storage.kept.values());
  for (const id of c.fusion.materialized) {
    const n = c.graph.nodes[id];
    if (n.op === "reduce_sum" || n.op === "reduce_max") {
      assert.ok(!c.storage.narrowed.has(id), `%${id} ${n.op} narrowed`);
    }
  }
  assert.ok(c.storage.narrowed.size >= 1, "the LayerNorm output read by the GEMM");
  for (const id of c.storage.narrowed) {
    assert.equal(c.graph.nodes[id].type.shape.length, 2);
    assert.deepEqual(c.graph.nodes[id].type.shape, [8, 32], "only whole activations narrow");
  }
  assert.ok(reasons.has("graph output"));
});

Deno.test("storage policy: backward pass — statistics, reduction results and parameter gradients stay f32", async () => {
  const { differentiate } = await import("../../compiler/training_graph/autodiff.ts");
  const m = new ModelBuilder("ln-bwd");
  // x comes from a GEMM, so LayerNorm's input gradient is an activation gradient (read by the GEMMs of
  // dW0), not an output: the normalization's values are narrowed, its statistics kept.
  const x = m.input("x0", "f32", [8, 16]).matmul(m.param("w0", [16, 32], "zeros"));
  const y = layerNorm(x, m.param("g", [32], "ones"), m.param("b", [32], "zeros"), 1e-12);
  const h = gelu(y.matmul(m.param("w", [32, 48], "zeros")));
  const probe = m.input("probe", "f32", [8, 48]);
  m.output("loss", h.mul(probe).sum([0, 1], false));
  const c = compile(applyPrecision(differentiate(m.graph, "loss"), "fp16"));
  const kept = [...c.storage.kept].map(([id, why]) => ({ n: c.graph.nodes[id], why }));
  // LayerNorm's per-row statistics (an [8, 1] value) are stored for the backward: f32.
  assert.ok(
    kept.some(({ n, why }) => why === "row statistic" && n.type.shape.join() === "8,1"),
    `no row statistic kept f32: ${kept.map(({ n, why }) => `${n.op}[${n.type.shape}] ${why}`).join("; ")}`,
  );
  for (const { n, why } of kept) {
    if (n.op === "reduce_sum" || n.op === "reduce_max") {
      assert.ok(why === "reduction result" || why === "graph output");
    }
  }
  // Every gradient is a graph output, f32.
  for (const [name, id] of c.graph.outputs) {
    if (name.startsWith("grad.")) assert.equal(c.storage.storedType(id), "f32", name);
  }
  // The activations between the kernels (normalized x, GELU input/output, their gradients) are narrowed.
  assert.ok(c.storage.narrowed.size >= 2, `${c.storage.narrowed.size} narrowed`);
  for (const id of c.storage.narrowed) assert.equal(c.graph.nodes[id].type.shape[0], 8);
  // Unfused, every op is a kernel and stores its result: still no statistic (anything computed from a
  // reduction before a broadcast, [8, 1] here) is narrowed, however many kernels it passes through.
  const u = compileGraph(applyPrecision(differentiate(m.graph, "loss"), "fp16"), {
    fuse: false,
    target: target("wgsl"),
    precision: "fp16",
  });
  assert.ok(u.storage.narrowed.size > c.storage.narrowed.size);
  for (const id of u.storage.narrowed) {
    const n = u.graph.nodes[id];
    assert.ok(n.type.shape.join() !== "8,1", `%${id} ${n.op}[${n.type.shape}] narrowed`);
  }
});

Deno.test("storage policy: operands of a concat stay f32 (the optimizer's flat gradient vector)", () => {
  const g = mixed((m) => {
    const a = m.input("a", "f32", [4, 16]);
    const b = m.input("b", "f32", [4, 16]);
    // Two results that other kernels also read (a GEMM each), so they are materialized, then
    // concatenated: concat's operands keep f32 whether the concat is a kernel or assembled in place.
    const ga = a.mul(3).exp();
    const gb = b.mul(-2).tanh();
    const w = m.param("w", [16, 16], "zeros");
    return {
      flat: m.concat([ga.reshape([64]), gb.reshape([64])], 0).mul(0.5),
      ya: ga.matmul(w),
      yb: gb.matmul(w),
    };
  });
  const c = compile(g);
  const ops = new Set(["exp", "tanh"]);
  const parts = [...c.fusion.materialized].filter((id) => ops.has(c.graph.nodes[id].op));
  assert.equal(parts.length, 2, "both parts are materialized");
  for (const id of parts) {
    assert.equal(c.storage.storedType(id), "f32");
    assert.equal(c.storage.kept.get(id), "concat operand");
  }
});

Deno.test("storage policy: a scatter-add accumulator stays f32", () => {
  const g = mixed((m) => {
    const ids = m.input("ids", "i32", [12]);
    const upd = m.input("upd", "f32", [12, 8]);
    // The table is read by a GEMM, so it is not an output itself.
    const table = m.scatterAdd(ids, upd.mul(2).exp(), 5);
    return { y: table.matmul(m.param("w", [8, 8], "zeros")) };
  });
  const sc = decisions(compile(g), "scatter_add");
  assert.equal(sc.length, 1);
  assert.equal(sc[0].kept, "scatter-add accumulator");
});

Deno.test("storage policy: a value feeding an output through elementwise ops stays f32", () => {
  const g = mixed((m) => {
    // t (a gradient, say) is materialized for a column sum and feeds the output `p - 0.1·tᵀ` (an
    // update) elementwise: narrowing it would round the update itself. (Two transcendentals, so that
    // fusion stores t rather than recomputing it from x and its row sums: remat.ts.)
    const x = m.input("x", "f32", [64, 48]);
    const t = x.exp().mul(x.sum(-1)).tanh();
    return { out: m.param("p", [48, 64], "zeros").sub(t.transpose().mul(0.1)), s: t.mul(t).sum(0) };
  });
  const c = compile(g);
  const t = decisions(c, "tanh").filter((d) => c.graph.nodes[d.id].type.shape.join() === "64,48");
  assert.equal(t.length, 1, "t is materialized");
  assert.equal(t[0].kept, "feeds an output elementwise");
  assert.equal(c.storage.narrowed.size, 0);
});

Deno.test("storage policy: integer and bool buffers keep their dtype", () => {
  const g = mixed((m) => {
    const x = m.input("x", "f32", [8, 16]);
    const mask = x.gt(0);
    const idx = x.mul(3).cast("i32");
    const w = m.param("w", [16, 16], "zeros");
    // mask and idx are read by a GEMM's kernel and by the outputs' kernels.
    const y = m.concat([mask.cast("f32"), idx.cast("f32")], 1);
    return { y: x.matmul(w).mul(mask.cast("f32")), z: y.sum(-1), i: idx.mul(2) };
  });
  const c = compile(g);
  for (const id of c.fusion.materialized) {
    const t = c.graph.nodes[id].type.dtype;
    if (t !== "f32") assert.equal(c.storage.storedType(id), t);
    if (c.storage.narrowed.has(id)) assert.equal(t, "f32");
  }
});

Deno.test("plan and lowering honour the stored dtype: f16 buffers, half the bytes, f16 loads and stores", () => {
  const g = mlp();
  const before = compile(g, "fp32"), after = compile(g, "fp16");
  const id = [...after.storage.narrowed][0];
  const buf = after.plan.buffers.find((b) => b.name.startsWith(`%${id} `))!;
  const old = before.plan.buffers.find((b) => b.name.startsWith(`%${id} `))!;
  assert.equal(old.dtype, "f32");
  assert.equal(buf.dtype, "f16");
  assert.equal(buf.bytes * 2, old.bytes);
  const moved = (c: Compiled) => c.plan.kernels.reduce((s, k) => s + k.bytesRead + k.bytesWritten, 0);
  // The GEMM weights, stored f16 too (storage.lowWeights), are read once each at half size.
  const weightBytes = [...after.storage.lowWeights].reduce(
    (s, w) => s + (after.graph.nodes[w].type.shape.reduce((a, b) => a * b, 1) * 4) / 2,
    0,
  );
  assert.equal(after.storage.lowWeights.size, 2);
  assert.equal(
    moved(before) - moved(after),
    2 * old.bytes / 2 + weightBytes,
    "written once and read once, at half size",
  );
  // The producing kernel stores f16; the consuming kernel loads f16 and widens to f32.
  const uses = (k: Kernel) => k.bindings.filter((b) => b.buffer === buf.id);
  const [producer, consumer] = [
    after.kernels.find((k) => uses(k).some((b) => b.access !== "read"))!,
    after
      .kernels.find((k) => uses(k).some((b) => b.access === "read"))!,
  ];
  for (const k of [producer, consumer]) {
    assert.equal(uses(k)[0].t, "f16");
    assert.ok(k.usesF16, `${k.name} must enable f16`);
  }
  const name = uses(consumer)[0].name;
  const loads: KExpr[] = [];
  visitExprs(consumer.body, (e) => {
    if (e.k === "load" && e.buf === name) loads.push(e);
  });
  assert.ok(loads.length > 0);
  for (const l of loads) assert.equal(l.t, "f16");
});

Deno.test("vectorized loop kernels read and write narrowed buffers as vec4<f16>", () => {
  // Unfused, each elementwise op of the GELU is a loop kernel from one narrowed buffer to another.
  const c = compileGraph(mlp(), { fuse: false, target: target("wgsl"), precision: "fp16" });
  const narrowed = new Set(
    c.plan.buffers.filter((b) => b.dtype === "f16" && b.role === "activation").map((b) => b.id),
  );
  const loops = c.kernels.filter((k) => k.kind === "loop" && k.bindings.every((b) => narrowed.has(b.buffer)));
  assert.ok(loops.length >= 3, `${loops.length} loop kernels over narrowed buffers only`);
  for (const k of loops) {
    assert.ok(
      k.bindings.every((b) => b.t === "f16" && b.vector === 4),
      `${k.name}: ${JSON.stringify(k.bindings)}`,
    );
    const wgsl = emitWGSL(k).code;
    assert.match(wgsl, /enable f16;/);
    assert.match(wgsl, /array<vec4<f16>>/);
  }
});

Deno.test("round-trip graph: fp32 storage reproduces the graph; fp16 rounds each narrowed value once", () => {
  // The GELU'd activation is read as the second GEMM's operand (cast to f16 there anyway) and by a row
  // sum of squares (in f32).
  const g = mixed((m) => {
    const x = m.input("x", "f32", [16, 32]);
    const h = gelu(x.matmul(m.param("w1", [32, 64], "zeros")).add(m.param("b1", [64], "zeros")));
    return { y: h.matmul(m.param("w2", [64, 32], "zeros")), z: h.mul(h).sum(-1) };
  });
  const feeds = randomFeeds(g, 77);
  const plain = compile(g, "fp32"), c = compile(g, "fp16");
  const asPlain = evaluate(roundTripGraph(plain.graph, plain.fusion, plain.storage), feeds, {
    precision: "f32",
  });
  const rt = roundTripGraph(c.graph, c.fusion, c.storage);
  const asStored = evaluate(rt, feeds, { precision: "f32" });
  const trips = (r: Graph) =>
    r.nodes.filter((n) =>
      n.op === "cast" && n.attrs.to === "f32" && r.nodes[n.inputs[0]].op === "cast" &&
      r.nodes[n.inputs[0]].attrs.to === "f16" && r.nodes[r.nodes[n.inputs[0]].inputs[0]].type.dtype === "f32"
    ).length;
  // (GEMM operands cast to f16 and widened for the f32 accumulation are round trips in both.)
  assert.equal(
    trips(rt) - trips(roundTripGraph(plain.graph, plain.fusion, plain.storage)),
    c.storage.narrowed.size + c.storage.lowWeights.size,
  );
  assert.equal(c.storage.narrowed.size, 1);
  const err = (name: string) => {
    const a = asStored.get(name)!, b = asPlain.get(name)!;
    let maxRef = 0, maxErr = 0;
    for (let i = 0; i < a.length; i++) {
      maxRef = Math.max(maxRef, Math.abs(b[i]));
      maxErr = Math.max(maxErr, Math.abs(a[i] - b[i]));
    }
    return maxErr / maxRef;
  };
  // Rounding to f16 twice is rounding once: the GEMM that reads the narrowed value loses nothing.
  assert.equal(err("y"), 0);
  // The row sum reads the f16 value widened: off by about an f16 rounding, no more.
  assert.ok(err("z") > 0 && err("z") < 2e-3, `z: ${err("z")}`);
});
