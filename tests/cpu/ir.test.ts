/**
 * The tensor IR: print -> parse -> print stability (every op, BERT-tiny, special numbers, locations),
 * parse errors with line numbers, the verifier on valid and hand-corrupted graphs, and the op table's
 * category predicates and type-inference errors.
 */
import assert from "node:assert/strict";
import {
  assertValidGraph,
  type DType,
  Graph,
  IRError,
  isComposite,
  isElementwise,
  isLibrary,
  isMovement,
  isReduce,
  isSource,
  type Node,
  type NodeId,
  OP_NAMES,
  type OpName,
  OPS,
  parseGraph,
  printGraph,
  type TensorType,
  verifyGraph,
} from "../../ir/mod.ts";

const T = (dtype: DType, shape: number[]): TensorType => ({ dtype, shape });

/** Adds an input node named `name`. */
function inp(g: Graph, name: string, dtype: DType, shape: number[]): NodeId {
  return g.add("input", [], { name }, T(dtype, shape));
}

function unaryCase(op: OpName, dtype: DType = "f32") {
  return (g: Graph) => g.add(op, [inp(g, "x", dtype, [2, 3])]);
}

function binaryCase(op: OpName, dtype: DType = "f32") {
  return (g: Graph) => g.add(op, [inp(g, "a", dtype, [2, 3]), inp(g, "b", dtype, [2, 3])]);
}

/**
 * One hand-written graph per op, with its attributes. The mapped type makes `deno check` reject the file
 * when an op is added to the table without a case here; the test below checks the same at run time.
 */
const OP_CASES: { [K in OpName]: (g: Graph) => NodeId } = {
  input: (g) => inp(g, "tokens", "i32", [2, 8]),
  param: (g) => g.add("param", [], { name: "w", init: "trunc_normal(0.02)" }, T("f32", [3, 4])),
  const: (g) => g.add("const", [], { value: -1.5 }, T("f16", [2])),
  iota: (g) => g.add("iota", [], { axis: 1 }, T("u32", [3, 5])),
  neg: unaryCase("neg", "i32"),
  abs: unaryCase("abs"),
  exp: unaryCase("exp", "bf16"),
  log: unaryCase("log"),
  tanh: unaryCase("tanh", "f16"),
  erf: unaryCase("erf"),
  sqrt: unaryCase("sqrt"),
  rsqrt: unaryCase("rsqrt"),
  reciprocal: unaryCase("reciprocal"),
  stop_gradient: unaryCase("stop_gradient"),
  not: unaryCase("not", "bool"),
  cast: (g) => g.add("cast", [inp(g, "x", "f32", [2, 3])], { to: "bf16" }),
  add: binaryCase("add"),
  sub: binaryCase("sub", "i32"),
  mul: binaryCase("mul", "f16"),
  div: binaryCase("div"),
  max: binaryCase("max"),
  min: binaryCase("min", "u32"),
  and: binaryCase("and", "bool"),
  or: binaryCase("or", "bool"),
  eq: binaryCase("eq", "i32"),
  ne: binaryCase("ne"),
  lt: binaryCase("lt"),
  le: binaryCase("le"),
  gt: binaryCase("gt"),
  ge: binaryCase("ge"),
  where: (g) =>
    g.add("where", [inp(g, "c", "bool", [2, 3]), inp(g, "a", "f32", [2, 3]), inp(g, "b", "f32", [2, 3])]),
  reduce_sum: (g) => g.add("reduce_sum", [inp(g, "x", "f32", [2, 3, 4])], { axes: [0, 2] }),
  reduce_max: (g) => g.add("reduce_max", [inp(g, "x", "f32", [2, 3, 4])], { axes: [1] }),
  reshape: (g) => g.add("reshape", [inp(g, "x", "f32", [2, 3, 4])], { shape: [6, 4] }),
  broadcast: (g) => g.add("broadcast", [inp(g, "x", "f32", [2, 1, 4])], { shape: [5, 2, 3, 4] }),
  permute: (g) => g.add("permute", [inp(g, "x", "f32", [2, 3, 4])], { perm: [2, 0, 1] }),
  slice: (g) => g.add("slice", [inp(g, "x", "f32", [4, 5])], { start: [1, 0], end: [3, 4] }),
  pad: (g) => g.add("pad", [inp(g, "x", "f32", [2, 3])], { low: [1, 0], high: [0, 2] }),
  concat: (g) =>
    g.add("concat", [inp(g, "a", "f32", [2, 1]), inp(g, "b", "f32", [2, 3]), inp(g, "c", "f32", [2, 2])], {
      axis: 1,
    }),
  matmul: (g) =>
    g.add("matmul", [inp(g, "a", "f32", [2, 4, 3]), inp(g, "b", "f32", [2, 4, 5])], {
      transpose_a: true,
      transpose_b: false,
    }),
  gather: (g) => g.add("gather", [inp(g, "table", "f32", [7, 4]), inp(g, "idx", "i32", [2, 3])]),
  scatter_add: (g) =>
    g.add("scatter_add", [inp(g, "idx", "i32", [2, 3]), inp(g, "upd", "f32", [2, 3, 4])], { rows: 7 }),
  random_uniform: (g) =>
    g.add("random_uniform", [inp(g, "key", "u32", [2])], { stream: 3 }, T("f32", [4, 4])),
  attention: (g) => g.add("attention", attentionIns(g, "q k v mask key"), ATT),
  attention_grad: (g) =>
    g.add("attention_grad", attentionIns(g, "q k v mask dO key"), { ...ATT, wrt: 1, wanted: [0, 1] }),
};
const ATT = { scale: 0.5, dropout: 0.1, stream: 2 };
const ATT_SHAPES: Record<string, number[]> = { k: [2, 5, 3], v: [2, 5, 3], mask: [2, 1, 5], key: [2] };
/** Attention's operands by name: the key u32, the others f32; q and dO [2,4,3]. */
const attentionIns = (g: Graph, names: string) =>
  names.split(" ").map((n) => inp(g, n, n === "key" ? "u32" : "f32", ATT_SHAPES[n] ?? [2, 4, 3]));

function opGraph(op: OpName): { g: Graph; id: NodeId } {
  const g = new Graph(`case_${op}`);
  const id = OP_CASES[op](g);
  g.setOutput("out", id);
  return { g, id };
}

function roundTrip(g: Graph): { text: string; again: string; parsed: Graph } {
  const text = printGraph(g);
  const parsed = parseGraph(text);
  return { text, again: printGraph(parsed), parsed };
}

// ---- print -> parse -> print ------------------------------------------------------------------

Deno.test("ir: the op cases cover every op in OP_NAMES", () => {
  assert.deepEqual(Object.keys(OP_CASES).sort(), [...OP_NAMES].sort());
  const seen = new Set<string>();
  for (const op of OP_NAMES) {
    const { g, id } = opGraph(op);
    assert.equal(g.nodes[id].op, op, `case for ${op} builds a ${g.nodes[id].op} node`);
    for (const n of g.nodes) seen.add(n.op);
  }
  assert.deepEqual([...seen].sort(), [...OP_NAMES].sort());
});

Deno.test("ir: print -> parse -> print is identical for a graph of every op", () => {
  for (const op of OP_NAMES) {
    const { g, id } = opGraph(op);
    const { text, again, parsed } = roundTrip(g);
    assert.equal(again, text, `round trip of ${op}`);
    // The parsed graph is the same graph, not just the same text.
    assert.deepEqual(parsed.nodes, g.nodes, `nodes of ${op}`);
    assert.deepEqual([...parsed.outputs], [...g.outputs]);
    // Attributes are printed by name.
    for (const k of Object.keys(g.nodes[id].attrs)) assert.match(text, new RegExp(`\\b${k}: `), `${op}.${k}`);
    assert.deepEqual(verifyGraph(parsed), [], `verify ${op}`);
  }
});

Deno.test("ir: a hand-written text graph parses and prints back verbatim", () => {
  const text = [
    'graph "hand \\"written\\"" {',
    '  %0 = input() {name: "x"} : f32[2,3]  # models/toy.ts:7',
    '  %1 = param() {name: "w", init: "trunc_normal(0.02)"} : f32[4,3]  # models/toy.ts:8',
    "  %2 = matmul(%0, %1) {transpose_a: false, transpose_b: true} : f32[2,4]  # models/toy.ts:9",
    "  %3 = reduce_max(%2) {axes: [1]} : f32[2,1]",
    "  %4 = broadcast(%3) {shape: [2, 4]} : f32[2,4]",
    "  %5 = sub(%2, %4) : f32[2,4]  # models/toy.ts:11",
    "  %6 = const() {value: 1e-12} : f32[2,4]",
    "  %7 = add(%5, %6) : f32[2,4]",
    '  %8 = cast(%7) {to: "f16"} : f16[2,4]',
    '  %9 = input() {name: "rng_key"} : u32[2]',
    "  %10 = random_uniform(%9) {stream: 0} : f32[]",
    '  output "y" = %8',
    '  output "r" = %10',
    "}",
    "",
  ].join("\n");
  const g = parseGraph(text);
  assert.equal(g.name, 'hand "written"');
  assert.equal(g.nodes.length, 11);
  assert.equal(g.nodes[1].loc, "models/toy.ts:8");
  assert.equal(g.nodes[3].loc, undefined);
  assert.deepEqual(g.nodes[10].type, { dtype: "f32", shape: [] });
  assert.equal(printGraph(g), text);
});

Deno.test("ir: parse renumbers sparse node ids densely in order of appearance", () => {
  const g = parseGraph([
    'graph "sparse" {',
    '  %10 = input() {name: "a"} : f32[2]',
    "  %4 = neg(%10) : f32[2]",
    "  %99 = add(%10, %4) : f32[2]",
    '  output "o" = %99',
    "}",
  ].join("\n"));
  assert.deepEqual(g.nodes.map((n) => n.id), [0, 1, 2]);
  assert.deepEqual(g.nodes[2].inputs, [0, 1]);
  assert.equal(g.outputs.get("o"), 2);
});

Deno.test("ir: BERT-tiny pretraining train graph survives print -> parse -> print", async () => {
  const bert = (await import("../../models/bert-tiny.ts")).default;
  for (const trackLocations of [false, true]) {
    const g = bert.build({ head: "pretraining", mode: "train", batchSize: 2, seqLen: 8, trackLocations });
    const { text, again, parsed } = roundTrip(g);
    assert.equal(again, text);
    assert.equal(parsed.nodes.length, g.nodes.length);
    assert.deepEqual([...parsed.outputs.keys()], [
      "loss",
      "mlm_loss",
      "nsp_loss",
      "mlm_accuracy",
      "nsp_accuracy",
    ]);
    assert.deepEqual(verifyGraph(parsed), []);
    const withLoc = g.nodes.filter((n) => n.loc !== undefined).length;
    if (trackLocations) {
      assert.equal(withLoc, g.nodes.length, "every node of a tracked build has a location");
      assert.match(text, / {2}# (?:\S*\/)?models\/bert\.ts:\d+\n/);
    } else {
      assert.equal(withLoc, 0);
      assert.doesNotMatch(text, /#/);
    }
  }
});

Deno.test("ir: special numbers (inf, -inf, nan, -0, extremes) survive the text form", () => {
  const values = [Infinity, -Infinity, NaN, -0, 0, 5e-324, -1.7976931348623157e308, 1e21, 1 / 3, -2.5e-7];
  const g = new Graph("special");
  for (const v of values) g.add("const", [], { value: v }, T("f32", [2]));
  g.setOutput("nan", 2);
  const { text, again, parsed } = roundTrip(g);
  assert.equal(again, text);
  assert.match(text, /\{value: inf\}/);
  assert.match(text, /\{value: -inf\}/);
  assert.match(text, /\{value: nan\}/);
  assert.match(text, /\{value: -0\}/);
  parsed.nodes.forEach((n, i) => {
    assert.ok(Object.is(n.attrs.value, values[i]), `value ${values[i]} came back as ${n.attrs.value}`);
  });
});

Deno.test("ir: locations ride along as '# file:line' comments", () => {
  const g = new Graph("locs");
  g.add("input", [], { name: "x" }, T("f32", [3]), "models/bert.ts:103");
  g.add("exp", [0], {}, undefined, "dsl/nn.ts:42");
  g.add("neg", [1]);
  g.add("log", [2], {}, undefined, "/abs/path with space/model.ts:7");
  g.setOutput("y", 3);
  const { text, again, parsed } = roundTrip(g);
  assert.equal(again, text);
  const lines = text.split("\n");
  assert.equal(lines[1], '  %0 = input() {name: "x"} : f32[3]  # models/bert.ts:103');
  assert.equal(lines[3], "  %2 = neg(%1) : f32[3]");
  assert.deepEqual(parsed.nodes.map((n) => n.loc), [
    "models/bert.ts:103",
    "dsl/nn.ts:42",
    undefined,
    "/abs/path with space/model.ts:7",
  ]);
});

// ---- parse errors ------------------------------------------------------------------------------

function parseError(text: string): IRError {
  try {
    parseGraph(text);
  } catch (e) {
    assert.ok(e instanceof IRError, `expected an IRError, got ${e}`);
    return e;
  }
  assert.fail("parse succeeded");
}

const HEAD = ['graph "bad" {', '  %0 = input() {name: "x"} : f32[2,3]'];

Deno.test("ir: parse errors name the line and what is wrong", () => {
  const cases: [string[], number, RegExp][] = [
    [[...HEAD, "  %1 = neg(%5) : f32[2,3]", "}"], 3, /%5 is used before it is defined/],
    [[...HEAD, "  %1 = frobnicate(%0) : f32[2,3]", "}"], 3, /unknown op 'frobnicate'/],
    [[...HEAD, "  %1 = neg(%0) : f64[2,3]", "}"], 3, /unknown dtype 'f64'/],
    [
      [...HEAD, "  %1 = neg(%0) : f32[3,2]", "}"],
      3,
      /declared type f32\[3,2\] differs from the inferred f32\[2,3\]/,
    ],
    [[...HEAD, "  %1 = neg(%0) : i32[2,3]", "}"], 3, /declared type i32\[2,3\] differs/],
    [
      [...HEAD, "", "  %1 = exp(%0) : f32[2,3]", '  output "y" = %7', "}"],
      5,
      /%7 is used before it is defined/,
    ],
    [[...HEAD, "  %1 = neg(%0) {bogus: 1} : f32[2,3]", "}"], 3, /neg: unknown attribute 'bogus'/],
    [[...HEAD, '  %0 = input() {name: "y"} : f32[2,3]', "}"], 3, /%0 is defined twice/],
    [[...HEAD, "  %1 = neg(%0) : f32[2,3] extra", "}"], 3, /expected end of line/],
    [[...HEAD, "}", "  %1 = neg(%0) : f32[2,3]"], 4, /after the closing '}'/],
    [[...HEAD, '  %1 = input() {name: "y"} : f32[3,2]', "  %2 = add(%0, %1) : f32[2,3]", "}"], 4, /add: /],
  ];
  for (const [lines, line, re] of cases) {
    const e = parseError(lines.join("\n"));
    assert.match(e.message, new RegExp(`^line ${line}, column \\d+: `), e.message);
    assert.match(e.message, re);
  }
});

Deno.test("ir: parse reports a missing closing '}'", () => {
  const e = parseError([...HEAD, "  %1 = neg(%0) : f32[2,3]", '  output "y" = %1'].join("\n"));
  assert.match(e.message, /missing closing '}'/);
});

Deno.test({
  name: "ir: a missing closing '}' names the line where the text ended",
  fn: () => {
    const e = parseError([...HEAD, "  %1 = neg(%0) : f32[2,3]", '  output "y" = %1'].join("\n"));
    assert.match(e.message, /line 4\b/);
    assert.match(e.message, /missing closing '}'/);
  },
});

// ---- the verifier -------------------------------------------------------------------------------

/** x f32[2,3] -> exp -> reduce_sum over axis 1 -> f32[2,1]; a param; outputs. */
function smallGraph(): Graph {
  const g = new Graph("small");
  const x = inp(g, "x", "f32", [2, 3]);
  const w = g.add("param", [], { name: "w", init: "ones" }, T("f32", [2, 3]));
  const e = g.add("exp", [x]);
  const m = g.add("mul", [e, w]);
  const s = g.add("reduce_sum", [m], { axes: [1] });
  g.setOutput("s", s);
  return g;
}

function replaceNode(g: Graph, id: NodeId, patch: Partial<Node>): void {
  g.nodes[id] = { ...g.nodes[id], ...patch };
}

Deno.test("ir: verifyGraph finds nothing wrong with valid graphs", async () => {
  assert.deepEqual(verifyGraph(smallGraph()), []);
  for (const op of OP_NAMES) assert.deepEqual(verifyGraph(opGraph(op).g), [], op);
  const bert = (await import("../../models/bert-tiny.ts")).default;
  for (const head of ["pretraining", "classification", "qa"] as const) {
    const g = bert.build({ head, mode: "train", batchSize: 2, seqLen: 8 });
    assert.deepEqual(verifyGraph(g), [], head);
    assertValidGraph(g);
  }
});

Deno.test("ir: verifyGraph reports a wrong node type", () => {
  const g = smallGraph();
  replaceNode(g, 4, { type: T("f32", [2, 3]) });
  const p = verifyGraph(g);
  assert.equal(p.length, 1, p.join("\n"));
  assert.match(p[0], /^%4 \(reduce_sum\): type f32\[2,3\] differs from the inferred f32\[2,1\]/);

  const h = smallGraph();
  replaceNode(h, 2, { type: T("f16", [2, 3]) });
  const q = verifyGraph(h);
  // exp's own type is wrong, and mul now sees f16 and f32 operands.
  assert.ok(
    q.some((s) => /^%2 \(exp\): type f16\[2,3\] differs from the inferred f32\[2,3\]/.test(s)),
    q.join(),
  );
  assert.ok(q.some((s) => /^%3 \(mul\): .*f16\[2,3\] and f32\[2,3\]/.test(s)), q.join());
});

Deno.test("ir: verifyGraph reports an operand defined after its use", () => {
  const g = smallGraph();
  replaceNode(g, 2, { inputs: [3] });
  const p = verifyGraph(g);
  assert.ok(p.some((s) => /^%2 \(exp\): operands \[%3\] are not all defined before it/.test(s)), p.join());
  const h = smallGraph();
  replaceNode(h, 3, { inputs: [2, 3] }); // a node that uses itself
  assert.ok(verifyGraph(h).some((s) => /^%3 \(mul\): operands \[%2, %3\]/.test(s)));
});

Deno.test("ir: verifyGraph reports duplicate parameter and input names", () => {
  const g = smallGraph();
  g.add("param", [], { name: "w", init: "zeros" }, T("f32", [4]));
  g.add("input", [], { name: "x" }, T("i32", [1]));
  const p = verifyGraph(g);
  assert.equal(p.length, 2, p.join("\n"));
  assert.match(p[0], /^%5 \(param\): name 'w' is already used by %1/);
  assert.match(p[1], /^%6 \(input\): name 'x' is already used by %0/);
});

Deno.test("ir: verifyGraph reports bad attributes", () => {
  const cases: [Partial<Node>, RegExp][] = [
    [{ attrs: {} }, /^%4 \(reduce_sum\): missing attribute 'axes'/],
    [{ attrs: { axes: [1], keep: true } }, /^%4 \(reduce_sum\): unknown attribute 'keep'/],
    [{ attrs: { axes: 1 } }, /^%4 \(reduce_sum\): attribute 'axes' must be ints, got 1/],
    [{ attrs: { axes: [2] } }, /^%4 \(reduce_sum\): axes \[2\] must be increasing and within rank 2/],
  ];
  for (const [patch, re] of cases) {
    const g = smallGraph();
    replaceNode(g, 4, patch);
    const p = verifyGraph(g);
    assert.ok(p.some((s) => re.test(s)), `${JSON.stringify(patch)}: ${p.join("; ")}`);
  }
  const g = smallGraph();
  replaceNode(g, 1, { attrs: { name: "w", init: "gaussian" } });
  assert.ok(verifyGraph(g).some((s) => /^%1 \(param\): unknown init 'gaussian'/.test(s)));
});

Deno.test("ir: verifyGraph reports a bad output reference, a wrong id and a wrong arity", () => {
  const g = smallGraph();
  g.outputs.set("ghost", 99);
  g.outputs.set("neg", -1);
  const p = verifyGraph(g);
  assert.deepEqual(p, ["output 'ghost' refers to undefined %99", "output 'neg' refers to undefined %-1"]);

  const h = smallGraph();
  replaceNode(h, 3, { id: 7 });
  assert.ok(verifyGraph(h).some((s) => /^%3 \(mul\): id is %7, expected %3/.test(s)));
  const k = smallGraph();
  replaceNode(k, 3, { inputs: [2] });
  assert.ok(verifyGraph(k).some((s) => /^%3 \(mul\): expects 2 operands, has 1/.test(s)));
});

Deno.test("ir: verifyGraph returns every problem; assertValidGraph throws them all", () => {
  const g = smallGraph();
  replaceNode(g, 4, { type: T("f32", [9]) });
  g.outputs.set("ghost", 42);
  assert.equal(verifyGraph(g).length, 2);
  assert.throws(() => assertValidGraph(g, "after-cse"), (e: unknown) => {
    assert.ok(e instanceof IRError);
    assert.match(e.message, /^after-cse: 'small' is invalid:/);
    assert.match(e.message, /%4 \(reduce_sum\): type f32\[9\]/);
    assert.match(e.message, /output 'ghost' refers to undefined %42/);
    return true;
  });
});

// ---- the op table ---------------------------------------------------------------------------------

// Written out by hand: a new op fails the test until someone decides which group it belongs to.
const EXPECTED_GROUPS: Record<string, readonly string[]> = {
  source: ["input", "param", "const", "iota"],
  elementwise: [
    ...["neg", "abs", "exp", "log", "tanh", "erf", "sqrt", "rsqrt", "reciprocal", "stop_gradient", "not"],
    ...["cast", "add", "sub", "mul", "div", "max", "min", "and", "or"],
    ...["eq", "ne", "lt", "le", "gt", "ge", "where"],
  ],
  reduce: ["reduce_sum", "reduce_max"],
  movement: ["reshape", "broadcast", "permute", "slice", "pad", "concat"],
  library: ["matmul"],
  composite: ["attention", "attention_grad"],
  other: ["gather", "scatter_add", "random_uniform"],
};

Deno.test("ir: the category predicates put every op in exactly its group", () => {
  const predicates: Record<string, (op: OpName) => boolean> = {
    source: isSource,
    elementwise: isElementwise,
    reduce: isReduce,
    movement: isMovement,
    library: isLibrary,
    composite: isComposite,
  };
  const listed = Object.values(EXPECTED_GROUPS).flat();
  assert.equal(new Set(listed).size, listed.length, "an op is listed in two groups");
  assert.deepEqual([...listed].sort(), [...OP_NAMES].sort(), "every op is classified by hand");
  for (const op of OP_NAMES) {
    const group = Object.keys(EXPECTED_GROUPS).find((k) => EXPECTED_GROUPS[k].includes(op))!;
    for (const [name, pred] of Object.entries(predicates)) {
      assert.equal(pred(op), name === group, `${name}(${op})`);
    }
    assert.ok(OPS[op].doc.length > 0, `${op} has a doc line`);
  }
});

Deno.test("ir: source ops take no operands and the rest take some", () => {
  for (const op of OP_NAMES) {
    const arity = OPS[op].arity;
    if (isSource(op)) assert.equal(arity, 0, op);
    else assert.ok(arity === -1 || arity >= 1, op);
  }
  assert.equal(OPS.concat.arity, -1);
  assert.equal(OPS.where.arity, 3);
});

function addError(build: (g: Graph) => void): IRError {
  const g = new Graph("errors");
  try {
    build(g);
  } catch (e) {
    assert.ok(e instanceof IRError, `expected an IRError, got ${e}`);
    return e;
  }
  assert.fail("no error");
}

Deno.test("ir: type inference rejects bad operands with an IRError naming the op", () => {
  const f = (g: Graph, shape: number[], dtype: DType = "f32", name = `v${g.nodes.length}`) =>
    inp(g, name, dtype, shape);
  const cases: [string, (g: Graph) => void, RegExp][] = [
    ["add shapes", (g) => g.add("add", [f(g, [2, 3]), f(g, [3, 2])]), /^add: .*f32\[2,3\] and f32\[3,2\]/],
    ["add dtypes", (g) => g.add("add", [f(g, [2], "i32"), f(g, [2])]), /^add: .*i32\[2\] and f32\[2\]/],
    ["add bool", (g) => g.add("add", [f(g, [2], "bool"), f(g, [2], "bool")]), /^add: needs numeric/],
    ["and f32", (g) => g.add("and", [f(g, [2]), f(g, [2])]), /^and: needs bool/],
    ["exp int", (g) => g.add("exp", [f(g, [2], "i32")]), /^exp: needs a float operand, got i32\[2\]/],
    ["not f32", (g) => g.add("not", [f(g, [2])]), /^not: needs a bool operand/],
    [
      "matmul inner",
      (g) => g.add("matmul", [f(g, [2, 3]), f(g, [4, 5])], { transpose_a: false, transpose_b: false }),
      /^matmul: inner dims differ: f32\[2,3\] @ f32\[4,5\] \(3 vs 4\)/,
    ],
    [
      "matmul transposed inner",
      (g) => g.add("matmul", [f(g, [2, 3]), f(g, [5, 4])], { transpose_a: false, transpose_b: true }),
      /^matmul: inner dims differ: f32\[2,3\] @ f32\[5,4\]ᵀ \(3 vs 4\)/,
    ],
    [
      "matmul batch",
      (g) => g.add("matmul", [f(g, [2, 3, 4]), f(g, [3, 4, 5])], { transpose_a: false, transpose_b: false }),
      /^matmul: batch dims differ/,
    ],
    [
      "matmul int",
      (g) =>
        g.add("matmul", [f(g, [3, 4], "i32"), f(g, [4, 5], "i32")], {
          transpose_a: false,
          transpose_b: false,
        }),
      /^matmul: needs float operands/,
    ],
    [
      "reduce out of range",
      (g) => g.add("reduce_sum", [f(g, [2, 3])], { axes: [2] }),
      /^reduce_sum: axes \[2\]/,
    ],
    [
      "reduce unsorted",
      (g) => g.add("reduce_max", [f(g, [2, 3])], { axes: [1, 0] }),
      /^reduce_max: axes \[1,0\]/,
    ],
    [
      "reduce repeated",
      (g) => g.add("reduce_sum", [f(g, [2, 3])], { axes: [1, 1] }),
      /^reduce_sum: axes \[1,1\]/,
    ],
    [
      "reduce negative",
      (g) => g.add("reduce_sum", [f(g, [2, 3])], { axes: [-1] }),
      /^reduce_sum: axes \[-1\]/,
    ],
    [
      "reduce empty",
      (g) => g.add("reduce_sum", [f(g, [2, 3])], { axes: [] }),
      /^reduce_sum: axes must not be empty/,
    ],
    [
      "reshape count",
      (g) => g.add("reshape", [f(g, [2, 3])], { shape: [4, 2] }),
      /^reshape: cannot reshape f32\[2,3\] to \[4,2\]/,
    ],
    [
      "reshape negative",
      (g) => g.add("reshape", [f(g, [2, 3])], { shape: [-1, 6] }),
      /^reshape: shape must be/,
    ],
    [
      "broadcast",
      (g) => g.add("broadcast", [f(g, [2, 3])], { shape: [4, 3] }),
      /^broadcast: cannot broadcast/,
    ],
    [
      "broadcast rank",
      (g) => g.add("broadcast", [f(g, [2, 3])], { shape: [3] }),
      /^broadcast: cannot broadcast/,
    ],
    ["permute", (g) => g.add("permute", [f(g, [2, 3])], { perm: [0, 0] }), /^permute: perm \[0,0\]/],
    [
      "slice",
      (g) => g.add("slice", [f(g, [2, 3])], { start: [0, 2], end: [2, 4] }),
      /^slice: slice \[0,2\]\.\.\[2,4\] is out of range for f32\[2,3\]/,
    ],
    ["pad", (g) => g.add("pad", [f(g, [2, 3])], { low: [0, -1], high: [0, 0] }), /^pad: /],
    [
      "concat",
      (g) => g.add("concat", [f(g, [2, 3]), f(g, [3, 3])], { axis: 1 }),
      /^concat: cannot concat f32\[3,3\] with f32\[2,3\] on axis 1/,
    ],
    ["concat axis", (g) => g.add("concat", [f(g, [2, 3])], { axis: 2 }), /^concat: axis 2 out of range/],
    [
      "where cond",
      (g) => g.add("where", [f(g, [2]), f(g, [2]), f(g, [2])]),
      /^where: condition must be bool/,
    ],
    ["gather float idx", (g) => g.add("gather", [f(g, [5, 2]), f(g, [3])]), /^gather: indices must be i32/],
    [
      "scatter shape",
      (g) => g.add("scatter_add", [f(g, [3], "i32"), f(g, [4, 2])], { rows: 5 }),
      /^scatter_add: updates f32\[4,2\] must start/,
    ],
    [
      "random key",
      (g) => g.add("random_uniform", [f(g, [2], "i32")], { stream: 0 }, T("f32", [4])),
      /^random_uniform: key must be u32\[2\]/,
    ],
    [
      "random dtype",
      (g) => g.add("random_uniform", [f(g, [2], "u32")], { stream: 0 }, T("f16", [4])),
      /^random_uniform: result must be f32/,
    ],
    ["iota float", (g) => g.add("iota", [], { axis: 0 }, T("f32", [4])), /^iota: iota must be i32 or u32/],
    ["iota axis", (g) => g.add("iota", [], { axis: 1 }, T("i32", [4])), /^iota: axis 1 out of range/],
    ["param int", (g) => g.add("param", [], { name: "p", init: "zeros" }, T("i32", [4])), /^param: .*float/],
    ["const no type", (g) => g.add("const", [], { value: 1 }), /^const: a declared result type is required/],
    ["arity", (g) => g.add("add", [f(g, [2])]), /^add: expects 2 operands, got 1/],
    ["concat arity", (g) => g.add("concat", [], { axis: 0 }), /^concat: expects one or more operands, got 0/],
    ["missing attr", (g) => g.add("permute", [f(g, [2, 3])]), /^permute: missing attribute 'perm'/],
    ["attr kind", (g) => g.add("cast", [f(g, [2])], { to: "f64" }), /^cast: attribute 'to' must be dtype/],
    ["undefined operand", (g) => g.add("neg", [f(g, [2]) + 1]), /^neg: operand %1 is not defined before %1/],
    ["unknown op", (g) => g.add("softmax", [f(g, [2])]), /unknown op 'softmax'/],
  ];
  for (const [what, build, re] of cases) {
    const e = addError(build);
    assert.match(e.message, re, `${what}: ${e.message}`);
  }
});

Deno.test("ir: a failed add leaves the graph unchanged", () => {
  const g = new Graph("atomic");
  const a = inp(g, "a", "f32", [2, 3]);
  const b = inp(g, "b", "f32", [3, 2]);
  assert.throws(() => g.add("add", [a, b]), IRError);
  assert.equal(g.nodes.length, 2);
  assert.equal(g.add("neg", [a]), 2);
});
