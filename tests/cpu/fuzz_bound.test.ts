/**
 * The fuzzer's tolerance model (cases/fuzz/bound.ts) on the CPU, without a device:
 * - sound: the reference interpreter in f32 (one rounding per f32 op, a legitimate "device") stays within
 *   the bound of the f64 reference on every output element of every graph;
 * - sharp: a graph with one op changed (add for sub, mul for add, tanh for exp, ...) is caught, so a
 *   bound is not so loose that a wrong kernel passes;
 * - the batch (cases/fuzz/batch.ts) computes each graph exactly as it computes alone.
 */
import assert from "node:assert/strict";
import { batchOf, renamed } from "../../cases/fuzz/batch.ts";
import { errorBounds } from "../../cases/fuzz/bound.ts";
import { fuzzGraph } from "../../cases/fuzz/generate.ts";
import { decomposeComposites } from "../../compiler/passes/decompose.ts";
import { seededRandom } from "../../cases/random.ts";
import { Graph, type NodeId } from "../../ir/mod.ts";
import { evaluate, evaluateNodes } from "../../runtime/reference/interpreter.ts";

const SEEDS = Array.from({ length: 120 }, (_, i) => 7000 + i);

Deno.test("fuzz bounds hold for the f32 interpreter against the f64 reference", () => {
  let elements = 0;
  for (const seed of SEEDS) {
    const f = fuzzGraph(seed), g = decomposeComposites(f.graph); // the primitives, as check.ts bounds them
    const ids = g.nodes.map((n) => n.id);
    const v64 = evaluateNodes(g, f.feeds, ids, "f64"), v32 = evaluateNodes(g, f.feeds, ids, "f32");
    const bounds = errorBounds(g, v64);
    for (const [name, id] of g.outputs) {
      if (f.skip.includes(name)) continue;
      v64[id].forEach((want, i) => {
        const err = Math.abs(v32[id][i] - want);
        assert.ok(!(err > bounds[id][i]), `seed ${seed} ${name}[${i}]: ${err} > bound ${bounds[id][i]}`);
        elements++;
      });
    }
  }
  assert.ok(elements > 10_000, `only ${elements} elements`);
});

/** Ops a mutant may put in place of another of the same arity and types. */
const SWAPS: Record<string, string[]> = {
  add: ["sub", "mul"],
  sub: ["add"],
  mul: ["add", "sub"],
  exp: ["tanh"],
  tanh: ["exp", "neg"],
  max: ["min"],
  min: ["max"],
  sqrt: ["exp"],
  rsqrt: ["sqrt"],
};

/** g with node `at` computing `op` instead. */
function mutant(g: Graph, at: NodeId, op: string): Graph {
  const out = new Graph(g.name);
  const map: NodeId[] = [];
  for (const n of g.nodes) {
    map[n.id] = out.add(n.id === at ? op : n.op, n.inputs.map((i) => map[i]), n.attrs, n.type, n.loc);
  }
  for (const [name, id] of g.outputs) out.setOutput(name, map[id]);
  return out;
}

Deno.test("fuzz bounds catch a graph with one op changed (at least 90% of mutants that change an output)", () => {
  const r = seededRandom(5);
  let mutants = 0, caught = 0;
  for (const seed of SEEDS) {
    const f = fuzzGraph(seed), g = decomposeComposites(f.graph); // the primitives, as check.ts bounds them
    const ids = g.nodes.map((n) => n.id);
    const v = evaluateNodes(g, f.feeds, ids, "f64");
    const bounds = errorBounds(g, v);
    const candidates = g.nodes.filter((n) => SWAPS[n.op] && n.type.dtype !== "bool");
    if (candidates.length === 0) continue;
    const n = candidates[r.int(0, candidates.length)];
    const ops = SWAPS[n.op];
    const m = mutant(g, n.id, ops[r.int(0, ops.length)]);
    const got = evaluate(m, f.feeds);
    let changed = false, outside = false;
    for (const [name, id] of g.outputs) {
      if (f.skip.includes(name)) continue;
      got.get(name)!.forEach((x, i) => {
        // A mutant on a path no output reads (or one that changes nothing here) is no test of the bound.
        if (!Object.is(x, v[id][i])) changed = true;
        if (!(Math.abs(x - v[id][i]) <= bounds[id][i])) outside = true;
      });
    }
    if (!changed) continue;
    mutants++;
    if (outside) caught++;
  }
  assert.ok(mutants >= 60, `only ${mutants} mutants changed an output`);
  console.log(`caught ${caught} of ${mutants} mutants`);
  assert.ok(caught >= 0.9 * mutants, `caught ${caught} of ${mutants} mutants`);
});

Deno.test("a fuzz batch computes each graph as it computes alone", () => {
  const parts = [11, 12, 13, 14].map(fuzzGraph);
  const b = batchOf(parts);
  const all = evaluate(b.graph, b.feeds);
  for (const p of parts) {
    for (const [name, values] of evaluate(p.graph, p.feeds)) {
      assert.deepEqual([...all.get(renamed(p.seed, name))!], [...values], `seed ${p.seed} ${name}`);
    }
  }
});
