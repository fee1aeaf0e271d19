/**
 * The pass pipeline and the debugging flags: flag parsing and its errors, the fuel counter, pass order
 * and timings, verification that blames the pass that broke the graph, SKIP_PASSES, numbered DUMP_DIR
 * dumps that parse back, and the DEBUG=1 / DEBUG=5 logs.
 */
import assert from "node:assert/strict";
import {
  DEBUG_FLAGS_TABLE,
  DebugFlagError,
  type DebugFlags,
  debugLog,
  Fuel,
  readDebugFlags,
} from "../../compiler/pipeline/debug.ts";
import { dce } from "../../compiler/passes/dce.ts";
import { simplify } from "../../compiler/passes/simplify.ts";
import {
  makePassContext,
  type Pass,
  PassError,
  quietContext,
  runPipeline,
} from "../../compiler/pipeline/stage_runner.ts";
import { Graph, parseGraph, printGraph } from "../../ir/mod.ts";

const env = (vars: Record<string, string>) => new Map(Object.entries(vars));
const flags = (f: Partial<DebugFlags>): DebugFlags => ({ level: 0, skipPasses: new Set(), ...f });

/** Runs f with console.error captured; returns the captured lines. */
function captureStderr(f: () => void): string[] {
  const lines: string[] = [];
  const orig = console.error;
  console.error = (...args: unknown[]) => lines.push(args.join(" "));
  try {
    f();
  } finally {
    console.error = orig;
  }
  return lines;
}

/** x -> neg -> neg -> exp, with a dead tanh: simplify removes the double negation, dce the dead nodes. */
function sample(): Graph {
  const g = new Graph("sample");
  const x = g.add("input", [], { name: "x" }, { dtype: "f32", shape: [2, 3] });
  g.add("tanh", [x]);
  const n = g.add("neg", [g.add("neg", [x])]);
  g.setOutput("y", g.add("exp", [n]));
  return g;
}

/** A pass that appends a node whose declared type is wrong (the verifier must catch it). */
const breaker: Pass = {
  name: "breaker",
  run(g) {
    const out = new Graph(g.name);
    for (const n of g.nodes) out.nodes.push(n);
    for (const [k, v] of g.outputs) out.outputs.set(k, v);
    const last = out.nodes.length - 1;
    out.nodes.push({
      id: last + 1,
      op: "exp",
      inputs: [last],
      type: { dtype: "f16", shape: [7] },
      attrs: {},
    });
    return out;
  },
};

// ---- flags ----------------------------------------------------------------------------------------

Deno.test("debug flags: defaults, and every variable parsed", () => {
  const none = readDebugFlags(env({}));
  assert.equal(none.level, 0);
  assert.equal(none.dumpDir, undefined);
  assert.equal(none.fusionFuel, undefined);
  assert.equal(none.skipPasses.size, 0);
  const f = readDebugFlags(
    env({ DEBUG: "3", DUMP_DIR: "out/dumps", SKIP_PASSES: " cse, dce,,", FUSION_FUEL: "12" }),
  );
  assert.equal(f.level, 3);
  assert.equal(f.dumpDir, "out/dumps");
  assert.deepEqual([...f.skipPasses], ["cse", "dce"]);
  assert.equal(f.fusionFuel, 12);
  assert.equal(readDebugFlags(env({ DEBUG: "", FUSION_FUEL: "0" })).fusionFuel, 0);
  assert.equal(readDebugFlags(env({ DEBUG: "" })).level, 0, "empty means unset");
});

Deno.test("debug flags: a bad value is an error naming the variable and the value", () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ DEBUG: "yes" }, /DEBUG .*'yes'/],
    [{ DEBUG: "6" }, /DEBUG .*0 to 5.*'6'/],
    [{ DEBUG: "-1" }, /DEBUG .*'-1'/],
    [{ DEBUG: "2.5" }, /DEBUG .*'2.5'/],
    [{ FUSION_FUEL: "ten" }, /FUSION_FUEL .*'ten'/],
    [{ FUSION_FUEL: "-3" }, /FUSION_FUEL .*'-3'/],
    [{ FUSION_FUEL: "1e3" }, /FUSION_FUEL .*'1e3'/],
    [{ SKIP_PASSES: "cse dce" }, /SKIP_PASSES: 'cse dce'/],
  ];
  for (const [vars, re] of cases) {
    assert.throws(
      () => readDebugFlags(env(vars)),
      (e: Error) => e instanceof DebugFlagError && re.test(e.message),
    );
  }
});

Deno.test("debug flags: the README table documents every variable and level", () => {
  for (const v of ["DEBUG", "DUMP_DIR", "SKIP_PASSES", "FUSION_FUEL"]) {
    assert.ok(DEBUG_FLAGS_TABLE.includes(`\`${v}\``), v);
  }
  for (const level of ["1", "2", "3", "4", "5"]) {
    assert.ok(DEBUG_FLAGS_TABLE.includes(`| \`${level}\``), level);
  }
  const widths = DEBUG_FLAGS_TABLE.trim().split("\n").map((l) => l.length);
  assert.ok(widths.every((w) => w === widths[0]), "columns are padded (deno fmt layout)");
});

Deno.test("fuel: counts down from its limit, unlimited when none is given", () => {
  const f = new Fuel(3);
  assert.deepEqual([f.take(), f.take(), f.take(), f.take(), f.take()], [true, true, true, false, false]);
  assert.equal(f.remaining, 0);
  assert.equal(f.used, 3);
  const zero = new Fuel(0);
  assert.equal(zero.take(), false);
  const inf = new Fuel();
  for (let i = 0; i < 1000; i++) assert.ok(inf.take());
  assert.equal(inf.remaining, Infinity);
  assert.equal(inf.used, 1000);
  assert.throws(() => new Fuel(-1), RangeError);
  assert.equal(makePassContext(flags({ fusionFuel: 2 })).fuel.remaining, 2);
});

Deno.test("debugLog: writes only at or above the level", () => {
  const lines = captureStderr(() => {
    debugLog(flags({ level: 2 }), 1, "one");
    debugLog(flags({ level: 2 }), 2, "two");
    debugLog(flags({ level: 2 }), 3, () => assert.fail("messages above the level are not even built"));
  });
  assert.deepEqual(lines, ["one", "two"]);
});

// ---- the pipeline ----------------------------------------------------------------------------------

Deno.test("pipeline: runs passes in order, reports timings and node counts", () => {
  const g = sample();
  const seen: string[] = [];
  const spy = (name: string): Pass => ({ name, run: (h) => (seen.push(name), h) });
  const { graph, timings } = runPipeline(g, [spy("a"), simplify, spy("b"), dce, simplify], quietContext());
  assert.deepEqual(seen, ["a", "b"]);
  assert.deepEqual(timings.map((t) => [t.pass, t.changed]), [
    ["a", false],
    ["simplify", true],
    ["b", false],
    ["dce", true],
    ["simplify", false],
  ]);
  assert.deepEqual(timings.map((t) => [t.nodesBefore, t.nodesAfter]), [[5, 5], [5, 4], [4, 4], [4, 2], [
    2,
    2,
  ]]);
  assert.ok(timings.every((t) => t.ms >= 0 && !t.skipped));
  assert.deepEqual(graph.nodes.map((n) => n.op), ["input", "exp"]);
  assert.equal(g.nodes.length, 5, "the input graph is untouched");
});

Deno.test("pipeline: a pass that leaves an invalid graph is named in the error", () => {
  assert.throws(
    () => runPipeline(sample(), [simplify, breaker, dce], quietContext()),
    (e: Error) =>
      e instanceof PassError && e.pass === "breaker" && /after pass 'breaker'/.test(e.message) &&
      /f16\[7\] differs from the inferred f32\[2,3\]/.test(e.message),
  );
});

Deno.test("pipeline: a pass that throws, or mutates its input, is named in the error", () => {
  const thrower: Pass = {
    name: "thrower",
    run: () => {
      throw new Error("boom");
    },
  };
  assert.throws(
    () => runPipeline(sample(), [thrower], quietContext()),
    (e: Error) =>
      e instanceof PassError && e.message === "pass 'thrower' failed: boom" && e.cause instanceof Error,
  );
  const mutator: Pass = {
    name: "mutator",
    run: (g) => (g.add("const", [], { value: 1 }, { dtype: "f32", shape: [] }), g),
  };
  assert.throws(
    () => runPipeline(sample(), [mutator], quietContext()),
    /pass 'mutator' modified its input graph/,
  );
});

Deno.test("pipeline: an invalid input graph is reported before any pass runs", () => {
  const g = breaker.run(sample(), quietContext());
  let ran = false;
  const p: Pass = { name: "p", run: (h) => (ran = true, h) };
  assert.throws(() => runPipeline(g, [p], quietContext()), /pipeline input: 'sample' is invalid/);
  assert.equal(ran, false);
});

Deno.test("pipeline: SKIP_PASSES skips by name; unknown names are an error listing the passes", () => {
  const ctx = makePassContext(flags({ skipPasses: new Set(["simplify"]) }));
  const { graph, timings } = runPipeline(sample(), [simplify, dce], ctx);
  assert.deepEqual(timings.map((t) => [t.pass, t.skipped]), [["simplify", true], ["dce", false]]);
  assert.deepEqual(graph.nodes.map((n) => n.op), ["input", "neg", "neg", "exp"]);
  const bad = makePassContext(flags({ skipPasses: new Set(["simplfy", "dce"]) }));
  assert.throws(
    () => runPipeline(sample(), [simplify, dce], bad),
    (e: Error) =>
      e instanceof DebugFlagError &&
      e.message === "SKIP_PASSES names 'simplfy', which is not a pass; the passes are: simplify, dce",
  );
  // A driver that splits its passes over several pipelines lists them all.
  const fusionSkip = makePassContext(flags({ skipPasses: new Set(["fusion"]) }));
  runPipeline(sample(), [dce], fusionSkip, { knownPasses: ["dce", "fusion"] });
});

Deno.test("pipeline: DUMP_DIR gets numbered before/after dumps that parse back", () => {
  const dir = Deno.makeTempDirSync({ prefix: "bertfuse-dumps-" });
  try {
    const ctx = makePassContext(flags({ dumpDir: `${dir}/nested`, skipPasses: new Set(["cse"]) }));
    const skipped: Pass = { name: "cse", run: () => assert.fail("skipped") };
    const g = sample();
    const { graph } = runPipeline(g, [simplify, skipped, dce], ctx);
    // Numbering continues across runs with one context.
    runPipeline(graph, [dce], ctx, { knownPasses: ["simplify", "cse", "dce"] });
    const files = [...Deno.readDirSync(`${dir}/nested`)].map((e) => e.name).sort();
    assert.deepEqual(files, [
      "01-after-simplify.ir",
      "01-before-simplify.ir",
      "02-after-dce.ir",
      "02-before-dce.ir",
      "03-after-dce.ir",
      "03-before-dce.ir",
    ]);
    const read = (f: string) => Deno.readTextFileSync(`${dir}/nested/${f}`);
    assert.equal(read("01-before-simplify.ir"), printGraph(g));
    assert.equal(read("02-after-dce.ir"), printGraph(graph));
    assert.equal(printGraph(parseGraph(read("01-after-simplify.ir"))), read("01-after-simplify.ir"));
    assert.equal(read("02-before-dce.ir"), read("01-after-simplify.ir"));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("pipeline: the broken graph is dumped too, for inspection", () => {
  const dir = Deno.makeTempDirSync({ prefix: "bertfuse-dumps-" });
  try {
    const ctx = makePassContext(flags({ dumpDir: dir }));
    assert.throws(() => runPipeline(sample(), [breaker], ctx), PassError);
    assert.match(Deno.readTextFileSync(`${dir}/01-after-breaker.ir`), /exp\(%4\) : f16\[7\]/);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("pipeline: DEBUG=1 logs pass timings, DEBUG=5 the IR after each pass, DEBUG=0 nothing", () => {
  const quiet = captureStderr(() => runPipeline(sample(), [simplify, dce], makePassContext(flags({}))));
  assert.deepEqual(quiet, []);
  const one = captureStderr(() =>
    runPipeline(sample(), [simplify, dce], makePassContext(flags({ level: 1 })))
  );
  assert.equal(one.length, 3);
  assert.match(one[0], /^\[pass\] simplify: [0-9.]+ ms, 5 -> 4 nodes$/);
  assert.match(one[1], /^\[pass\] dce: [0-9.]+ ms, 4 -> 2 nodes$/);
  assert.match(one[2], /^\[pass\] pipeline: [0-9.]+ ms$/);
  const three = captureStderr(() => runPipeline(sample(), [simplify], makePassContext(flags({ level: 3 }))));
  assert.ok(three.includes("[simplify] neg_neg 1"), three.join("\n"));
  const five = captureStderr(() =>
    runPipeline(sample(), [simplify, dce], makePassContext(flags({ level: 5 })))
  );
  const irLogs = five.filter((l) => l.startsWith("[pass] IR after"));
  assert.equal(irLogs.length, 2);
  assert.ok(irLogs[1].endsWith(printGraph(runPipeline(sample(), [simplify, dce], quietContext()).graph)));
});
