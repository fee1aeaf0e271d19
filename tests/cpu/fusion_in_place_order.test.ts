/**
 * Sibling fusion and flat vectors assembled in place (compiler/fusion/siblings.ts, in_place.ts): a kernel
 * reading such a vector depends on the kernels writing its parts, although none writes the vector itself.
 * Merging it with a kernel those parts depend on would run it before its operand exists (seen in
 * bert-large's training plan, where the optimizer's update merged with a kernel that ran before the
 * forward pass).
 */
import assert from "node:assert/strict";
import { fuseGraph } from "../util/fuse_graph.ts";
import { Graph } from "../../ir/mod.ts";
import { evaluate } from "../../runtime/reference/interpreter.ts";

Deno.test("siblings: a reader of an in-place flat vector does not merge with what its parts depend on", () => {
  const g = new Graph("in-place-order");
  const f32 = (n: number) => ({ shape: [n], dtype: "f32" as const });
  const x = g.add("input", [], { name: "x" }, f32(128));
  const y = g.add("input", [], { name: "y" }, f32(128));
  // K: over [128], reads x; materialized (two kernels read it).
  const k = g.add("mul", [x, y]);
  const one = g.add("const", [], { value: 1 }, f32(64));
  const three = g.add("const", [], { value: 3 }, f32(64));
  // The parts, each written into its range of V (64 f32 = 256 bytes: the alignment a placed range needs).
  const p1 = g.add("add", [g.add("slice", [k], { start: [0], end: [64] }), one]);
  const p2 = g.add("mul", [g.add("slice", [k], { start: [64], end: [128] }), three]);
  const v = g.add("concat", [p1, p2], { axis: 0 });
  // R: over [128], reads V and x — a sibling candidate of K (same space, a common read).
  g.setOutput("r", g.add("mul", [v, x]));
  g.setOutput("k2", g.add("add", [k, x]));
  const f = fuseGraph(g, { fuse: true });
  assert.ok(f.inPlace.concats.has(v), "V is not assembled in place: the test checks nothing");
  const kernelOfR = f.kernelOf[g.outputs.get("r")!];
  for (const part of [p1, p2]) {
    const writer = f.kernelOf[part];
    assert.notEqual(writer, kernelOfR, "a part is written by the kernel that reads the whole vector");
    // The writer of a part must come before the reader of V in fusion's kernel order.
    const order = f.kernels.map((kk) => kk.id);
    assert.ok(order.indexOf(writer) < order.indexOf(kernelOfR), `part %${part} written after V is read`);
  }
  // And what it computes is what the graph says (a sanity check of the case itself).
  const out = evaluate(g, {
    x: Float64Array.from({ length: 128 }, (_, i) => i / 7),
    y: new Float64Array(128).fill(2),
  });
  const x65 = 65 / 7;
  assert.ok(Math.abs(out.get("r")![65] - x65 * 2 * 3 * x65) < 1e-9);
});
