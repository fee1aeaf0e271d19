/**
 * Gradient outputs as views of the flat gradient vector (compiler/stages/output_views.ts): a LAMB training
 * step of a one-layer BERT returns every rank-1 parameter's gradient (biases, LayerNorm γ and β) as a
 * reshape of its piece of the flat vector. The plan must hold it once: the output's buffer lies where the
 * piece does and no step writes it; for cuda-sm90 the bias-gradient epilogues then copy nothing. Run on
 * the CPU backend on fresh random inputs, every output must match the reference interpreter; and two
 * planted mistakes must fail it: a view moved onto another piece of the vector, and the piece overwritten
 * after its kernel by a late step.
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { batchFeeds, optimizerStepFeeds } from "../../cases/bert_feeds.ts";
import { seededRandom } from "../../cases/random.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { PROFILES } from "../../compiler/targets/profiles.ts";
import { type Plan, type PlanBuffer, UPDATE_PREFIX } from "../../plan/plan.ts";
import { CpuExecutor } from "../../runtime/cpu/cpu_executor.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";
import { bgradCalls } from "../util/bgrad_plans.ts";
import { lambStep, oneLayerBert } from "../util/bert_steps.ts";
import { testCpu } from "../util/cpu_check.ts";
import { assertMatchesReference } from "../util/fused_check.ts";

const cpu = await testCpu();
const [B, S, P] = [2, 16, 3];
const g = lambStep(oneLayerBert("output-views"), "fp32", [B, S, P], false);
const cPlan = compileGraph(g, { fuse: true, target: target("c") }).plan;

/** Buffers some step writes: kernel bindings, copy steps, updates. */
function writtenBuffers(plan: Plan): Set<number> {
  const written = new Set<number>();
  for (const k of plan.kernels) for (const b of k.bindings) if (b.access !== "read") written.add(b.buffer);
  for (const s of plan.steps) if (s.op === "copy") written.add(s.dst);
  for (const u of plan.updates) written.add(u.param);
  return written;
}

/** The gradient outputs of rank-1 parameters, each with the written buffer at its bytes (its piece). */
function views(plan: Plan): { output: string; view: PlanBuffer; piece: PlanBuffer }[] {
  const written = writtenBuffers(plan);
  const rank1 = new Set(
    g.nodes.filter((n) => n.op === "param" && n.type.shape.length === 1).map((n) => n.attrs.name),
  );
  return Object.entries(plan.outputs).filter(([name]) => rank1.has(name.replace(/^grad\./, ""))).map(
    ([output, id]) => {
      const view = plan.buffers[id];
      assert.ok(!written.has(id), `${output}: written by a step of its own`);
      const pieces = plan.buffers.filter((b) =>
        b.id !== id && written.has(b.id) && b.slot === view.slot && (b.offset ?? 0) === (view.offset ?? 0) &&
        b.bytes === view.bytes
      );
      assert.equal(pieces.length, 1, `${output}: ${pieces.length} written buffers hold its bytes`);
      return { output, view, piece: pieces[0] };
    },
  );
}

Deno.test("output views: rank-1 gradients are views of their flat-vector pieces; BGRAD calls copy nothing", () => {
  const found = views(cPlan);
  // Per layer: Q, K, V, attention output, FFN up and down biases, two LayerNorms; plus the embeddings'
  // LayerNorm and the heads' biases and LayerNorm.
  assert.ok(found.length >= 12, `${found.length} views`);
  // Still the output as the graph names and shapes it: only its place is the piece's.
  for (const { output, view, piece } of found) {
    assert.deepEqual([view.name, view.role, view.shape.length], [output, "output", 1]);
    assert.notEqual(piece.role, "output", `${output}: its piece is an activation, not another output`);
  }
  const cuda = compileGraph(g, { fuse: true, target: target("cuda", PROFILES["cuda-sm90"]) }).plan;
  assert.equal(views(cuda).length, found.length);
  const calls = bgradCalls(cuda);
  assert.ok(calls.length > 0, "the step has bias-gradient epilogues");
  for (const c of calls) assert.deepEqual(c.epilogue.copies, [], `${c.kernel.name} copies its vector`);
});

Deno.test({
  name:
    "output views: a LAMB step on the CPU backend matches the reference; a moved or overwritten view fails",
  ignore: !cpu.ctx,
  async fn() {
    const r = seededRandom(4410);
    const feeds = {
      ...batchFeeds(g, { batch: B, seq: S, predictions: P, vocab: 99 }, r, 3),
      ...optimizerStepFeeds(g, r, 1),
    };
    const step = evaluate(g, feeds, { precision: "f32" });
    // An output the step also updates holds its new value afterwards.
    const ref = new Map([...step].map(([name, v]) => [name, step.get(UPDATE_PREFIX + name) ?? v]));
    const run = async (plan: Plan) => {
      const ex = await CpuExecutor.create(cpu.ctx!, plan);
      try {
        return await ex.run(feeds);
      } finally {
        ex.destroy();
      }
    };
    const tol = { rtol: 2e-4, atol: 1e-6 };
    assertMatchesReference(ref, await run(cPlan), { tol, device: "cpu", plan: "output views" });

    // Planted: two views of equal size swap places (each reads the other's piece).
    const found = views(cPlan);
    const [x, y] = found.filter((v) => v.view.bytes === found[0].view.bytes);
    assert.ok(x && y, "two views of one size");
    const moved: Plan = {
      ...cPlan,
      buffers: cPlan.buffers.map((b) =>
        b.id === x.view.id
          ? { ...b, offset: y.view.offset }
          : b.id === y.view.id
          ? { ...b, offset: x.view.offset }
          : b
      ),
    };
    const movedOut = await run(moved);
    assert.throws(
      () => assertMatchesReference(ref, movedOut, { tol, device: "cpu", plan: "planted: views swapped" }),
      /grad\./,
    );
    // Planted: a step after the step's kernels writes another piece over one view's piece.
    const overwritten: Plan = {
      ...cPlan,
      steps: [...cPlan.steps, { op: "copy", src: y.piece.id, dst: x.piece.id, bytes: x.piece.bytes }],
    };
    const overOut = await run(overwritten);
    assert.throws(
      () => assertMatchesReference(ref, overOut, { tol, device: "cpu", plan: "planted: piece overwritten" }),
      new RegExp(x.output.replace(/\./g, "\\.")),
    );
  },
});
