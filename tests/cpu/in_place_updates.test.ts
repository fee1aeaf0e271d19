/**
 * In-place updates (compiler/stages/in_place_updates.ts): a training step's new parameters and moments are
 * written over the old ones, with no copy-back after the step, where nothing reads the old ones later; the
 * kernel doing it binds the range once; a value read after its update keeps its copy. (The numbers are
 * checked end to end by the training-step tests on the CUDA shim, WebGPU and the CPU backend.)
 */
import { target } from "../util/target.ts";
import assert from "node:assert/strict";
import { fixtureStep } from "../util/bert_steps.ts";
import { compileGraph } from "../../compiler/driver/compile.ts";
import { QUIET } from "../../compiler/pipeline/debug.ts";
import { Graph } from "../../ir/mod.ts";
import type { Plan } from "../../plan/plan.ts";

const where = (p: Plan, id: number) => `${p.buffers[id].slot}@${p.buffers[id].offset ?? 0}`;

Deno.test("in-place updates: parameters and moments of a LAMB step are updated where they are", () => {
  const g = fixtureStep("fp16", [2, 8, 3], { kind: "lamb", dynamicScale: true });
  const copies = compileGraph(g, {
    fuse: true,
    target: target("cuda"),
    flags: { ...QUIET, skipPasses: new Set(["in-place-updates"]) },
  }).plan;
  const plan = compileGraph(g, { fuse: true, target: target("cuda") }).plan;
  const updated = (p: Plan) => p.updates.map((u) => p.buffers[u.param].name).sort();
  assert.deepEqual(updated(copies), ["flat.params", "low:flat.params", "opt.m", "opt.v", "train.state"]);
  // train.state is read through slices by the kernel that writes its new value: it keeps its copy.
  assert.deepEqual(updated(plan), ["train.state"]);
  for (const name of ["flat.params", "opt.m", "opt.v"]) {
    const value = plan.outputs[`new:${name}`];
    const target = plan.params[name] ?? plan.inputs[name] ?? plan.outputs[name];
    assert.equal(where(plan, value), where(plan, target), `new:${name} is not where ${name} is`);
    // Its writer binds the range once, read_write (no aliasing bindings).
    const writers = plan.kernels.filter((k) =>
      k.bindings.some((b) => b.buffer === value || b.buffer === target)
    );
    const last = writers.at(-1)!;
    const ranges = last.bindings.filter((b) => where(plan, b.buffer) === where(plan, target));
    assert.equal(ranges.length, 1, `${last.name} binds ${name}'s range ${ranges.length} times`);
    assert.equal(ranges[0].access, "read_write");
  }
  // The weight copies (compiler/passes/low_weight_copies.ts), rounded from the new weights and never read by the
  // kernel writing them: written in place, write-only, by the kernel writing the new weights.
  const lowFlat = plan.outputs["low:flat.params"];
  assert.equal(where(plan, plan.outputs["new:low:flat.params"]), where(plan, lowFlat));
  const writer = plan.kernels.filter((k) => k.bindings.some((b) => b.buffer === lowFlat));
  assert.equal(writer.length, 1);
  assert.deepEqual(writer[0].bindings.filter((b) => b.buffer === lowFlat).map((b) => b.access), ["write"]);
  // Device memory: three vectors fewer.
  const bytes = (p: Plan) => p.slots.reduce((s, x) => s + x.bytes, 0);
  assert.ok(bytes(plan) < bytes(copies), `${bytes(plan)} vs ${bytes(copies)}`);
});

Deno.test("in-place updates: a value read after its update keeps its copy", () => {
  const g = new Graph("read-after-update");
  const f32 = { shape: [256], dtype: "f32" as const };
  const w = g.add("param", [], { name: "w", init: "zeros" }, f32);
  const x = g.add("input", [], { name: "x" }, f32);
  const next = g.add("sub", [w, g.add("mul", [x, g.add("const", [], { value: 0.5 }, f32)])]);
  g.setOutput("new:w", next);
  // Reads the old w after the update: unfused, the product is a kernel of its own after the update.
  g.setOutput("late", g.add("reduce_sum", [g.add("mul", [w, next])], { axes: [0] }));
  const plan = compileGraph(g, { fuse: false, target: target("cuda") }).plan;
  assert.equal(plan.updates.length, 1, "the update must stay a copy");
});
