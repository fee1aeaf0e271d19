/**
 * simplify, cse and dce: every rule of the table fires where it is exact and stays quiet where it would
 * not be; results are bit-for-bit those of the unsimplified graph in both interpreter precisions, on
 * seeded random inputs mixed with IEEE special values (±0, ±inf, NaN, subnormals, extremes); one sweep is
 * a fixed point; CSE merges duplicates and only duplicates; DCE keeps the graph's interface; and the
 * tiny BERT training graph computes the same loss and gradients after simplify + cse + dce.
 */
import assert from "node:assert/strict";
import { differentiate } from "../../compiler/training_graph/autodiff.ts";
import { cse, cseGraph } from "../../compiler/passes/cse.ts";
import { dce, dceGraph } from "../../compiler/passes/dce.ts";
import { simplify, simplifyGraph } from "../../compiler/passes/simplify.ts";
import { RULES } from "../../compiler/passes/simplify_rules.ts";
import { quietContext, runPipeline } from "../../compiler/pipeline/stage_runner.ts";
import {
  type Attrs,
  type DType,
  Graph,
  type NodeId,
  numel,
  type OpName,
  type TensorType,
  typeToString,
} from "../../ir/mod.ts";
import bertTiny from "../../models/bert-tiny.ts";
import { initParams } from "../../model_io/init_params.ts";
import { evaluate, type Precision } from "../../runtime/reference/interpreter.ts";
import { type Rng, seededRandom } from "../../cases/random.ts";

// ---- inputs and comparison --------------------------------------------------------------------------

const SPECIAL: Record<DType, readonly number[]> = {
  f32: [0, -0, Infinity, -Infinity, NaN, 1, -1, 2 ** -149, 2 ** -126, 3.4028234663852886e38, 0.1, 65504],
  f16: [0, -0, Infinity, -Infinity, NaN, 1, -1, 2 ** -24, 65504, 0.5],
  bf16: [0, -0, Infinity, -Infinity, NaN, 1, -1, 2 ** -133, 3.3895313892515355e38],
  i32: [0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 7, -7],
  u32: [0, 1, 2 ** 32 - 1, 2 ** 31, 5],
  bool: [0, 1],
};

/** Seeded random values of a type, about a third of them replaced by the dtype's special values. */
function randomValues(r: Rng, t: TensorType, specials = true): number[] {
  const n = numel(t.shape);
  const v = Array.from({ length: n }, (): number => {
    switch (t.dtype) {
      case "i32":
        return r.int(-1000, 1000);
      case "u32":
        return r.int(0, 100000);
      case "bool":
        return r.int(0, 2);
      default:
        return 3 * r.normal();
    }
  });
  if (specials) {
    for (let i = 0; i < n; i++) {
      if (r.uniform() < 1 / 3) v[i] = SPECIAL[t.dtype][r.int(0, SPECIAL[t.dtype].length)];
    }
  }
  return v;
}

function feedsFor(g: Graph, r: Rng, specials: boolean): Record<string, number[]> {
  const feeds: Record<string, number[]> = {};
  for (const n of g.nodes) {
    if (n.op === "input" || n.op === "param") {
      feeds[n.attrs.name as string] = randomValues(r, n.type, specials);
    }
  }
  return feeds;
}

/** Every output of `after` equals that of `before` bit for bit (NaN equals NaN; -0 differs from +0). */
function assertSameOutputs(before: Graph, after: Graph, seed: number, trials = 3): void {
  assert.deepEqual([...after.outputs.keys()], [...before.outputs.keys()], "output names and order");
  const r = seededRandom(seed);
  for (let t = 0; t < trials; t++) {
    const feeds = feedsFor(before, r, t > 0); // the first trial plain random, then with special values
    for (const precision of ["f64", "f32"] as Precision[]) {
      const want = evaluate(before, feeds, { precision });
      const got = evaluate(after, feeds, { precision });
      for (const [name, w] of want) {
        const g = got.get(name)!;
        assert.equal(g.length, w.length, `${name}: length`);
        for (let i = 0; i < w.length; i++) {
          if (!Object.is(g[i], w[i])) {
            assert.fail(`output '${name}'[${i}] (${precision}, trial ${t}): got ${g[i]}, expected ${w[i]}`);
          }
        }
      }
    }
  }
}

// ---- tiny graphs, one rule at a time --------------------------------------------------------------------

const T = (dtype: DType, shape: readonly number[]): TensorType => ({ dtype, shape });

class Tiny {
  readonly g = new Graph("tiny");
  private readonly inputs = new Map<string, NodeId>();
  constructor(readonly dtype: DType = "f32", readonly shape: readonly number[] = [4, 8]) {}
  /** The input of that name, made on first use. */
  input(name: string, dtype = this.dtype, shape = this.shape): NodeId {
    let id = this.inputs.get(name);
    if (id === undefined) this.inputs.set(name, id = this.g.add("input", [], { name }, T(dtype, shape)));
    return id;
  }
  k(value: number, dtype = this.dtype, shape = this.shape): NodeId {
    return this.g.add("const", [], { value }, T(dtype, shape));
  }
  op(op: OpName, inputs: NodeId[], attrs: Attrs = {}, declared?: TensorType): NodeId {
    return this.g.add(op, inputs, attrs, declared);
  }
}

const firedSomewhere = new Set<string>();

/**
 * Builds a tiny graph with output "out", simplifies it (then removes dead nodes), checks whether `rule`
 * fired, what the output became (an op name, or "input:<name>"), and that the values did not change.
 */
function check(
  rule: string,
  fires: boolean,
  build: (t: Tiny) => NodeId,
  opts: { dtype?: DType; shape?: number[]; becomes?: string; seed?: number } = {},
): Graph {
  assert.ok(RULES.some((r) => r.name === rule), `no rule named ${rule}`);
  const t = new Tiny(opts.dtype, opts.shape);
  t.g.setOutput("out", build(t));
  const { graph, fired } = simplifyGraph(t.g);
  if (fires) {
    assert.ok(fired.has(rule), `${rule} should fire; fired: ${[...fired.keys()].join(", ") || "nothing"}`);
    firedSomewhere.add(rule);
  } else {
    assert.ok(!fired.has(rule), `${rule} must not fire here`);
  }
  const after = dceGraph(graph).graph;
  if (opts.becomes !== undefined) {
    const out = after.node(after.outputs.get("out")!);
    const what = out.op === "input" ? `input:${out.attrs.name}` : out.op;
    assert.equal(what, opts.becomes, `${rule}: output is ${what}`);
  }
  assertSameOutputs(t.g, after, opts.seed ?? rule.length * 7919);
  return after;
}

Deno.test("simplify: constant folding of splats, only where both precisions agree", () => {
  check("fold_elementwise", true, (t) => t.op("mul", [t.k(0.5), t.k(4)]), { becomes: "const" });
  check("fold_elementwise", true, (t) => t.op("exp", [t.k(1)]), { becomes: "const" });
  check("fold_elementwise", true, (t) => t.op("add", [t.k(2 ** 31 - 1), t.k(1)]), {
    dtype: "i32",
    becomes: "const",
  });
  check("fold_elementwise", true, (t) => t.op("div", [t.k(-7), t.k(2)]), { dtype: "i32", becomes: "const" });
  check("fold_elementwise", true, (t) => t.op("add", [t.k(0.1), t.k(0.2)]), {
    dtype: "f16",
    becomes: "const",
  });
  check("fold_elementwise", true, (t) => t.op("cast", [t.k(3.7)], { to: "i32" }), { becomes: "const" });
  check("fold_elementwise", true, (t) => t.op("where", [t.k(1, "bool"), t.k(3), t.k(4)]), {
    becomes: "const",
  });
  // 1.00000001 is 1 in f32 but not in f64, so the difference is 0 in one precision and 1e-8 in the other.
  check("fold_elementwise", false, (t) => t.op("sub", [t.k(1.00000001), t.k(1)]), { becomes: "sub" });
  // The folded value keeps what the f64 interpreter computes (unrounded) and rounds to the same f32.
  const g = check("fold_elementwise", true, (t) => t.op("neg", [t.k(0.1)]), { becomes: "const" });
  assert.equal(g.node(g.outputs.get("out")!).attrs.value, -0.1);
});

Deno.test("simplify: folding movement, reductions and matmuls of splats", () => {
  check("fold_movement", true, (t) => t.op("broadcast", [t.k(3, "f32", [1, 8])], { shape: [4, 8] }), {
    becomes: "const",
  });
  check("fold_movement", true, (t) => t.op("permute", [t.k(NaN)], { perm: [1, 0] }), { becomes: "const" });
  check(
    "fold_movement",
    true,
    (t) => t.op("concat", [t.k(2, "f32", [2, 8]), t.k(2, "f32", [2, 8])], { axis: 0 }),
    {
      becomes: "const",
    },
  );
  check(
    "fold_movement",
    false,
    (t) => t.op("concat", [t.k(2, "f32", [2, 8]), t.k(3, "f32", [2, 8])], { axis: 0 }),
  );
  check("fold_movement", true, (t) => t.op("pad", [t.k(0, "f32", [2, 8])], { low: [1, 0], high: [1, 0] }), {
    becomes: "const",
  });
  // pad inserts +0, so padding a splat of anything else (-0 included) is not a splat.
  check("fold_movement", false, (t) => t.op("pad", [t.k(-0, "f32", [2, 8])], { low: [1, 0], high: [1, 0] }));
  check("fold_movement", false, (t) => t.op("pad", [t.k(5, "f32", [2, 8])], { low: [1, 0], high: [1, 0] }));
  check("fold_reduce", true, (t) => t.op("reduce_sum", [t.k(0.25, "f32", [4, 8])], { axes: [1] }), {
    becomes: "const",
  });
  check("fold_reduce", true, (t) => t.op("reduce_sum", [t.k(0.1, "f32", [4, 8])], { axes: [0, 1] }), {
    becomes: "const",
  });
  check("fold_reduce", true, (t) => t.op("reduce_max", [t.k(-0, "f32", [4, 8])], { axes: [0] }), {
    becomes: "const",
  });
  check("fold_reduce", true, (t) => t.op("reduce_sum", [t.k(-0, "f32", [4, 8])], { axes: [0] }), {
    becomes: "const",
  });
  check("fold_matmul", true, (t) =>
    t.op("matmul", [t.k(0.5, "f32", [2, 3, 5]), t.k(3, "f32", [2, 5, 4])], {
      transpose_a: false,
      transpose_b: false,
    }), { becomes: "const" });
  check(
    "fold_matmul",
    true,
    (t) =>
      t.op("matmul", [t.k(1.5, "f16", [5, 3]), t.k(-2, "f16", [4, 5])], {
        transpose_a: true,
        transpose_b: true,
      }),
    {
      becomes: "const",
    },
  );
  check("iota_unit_axis", true, (t) => t.op("iota", [], { axis: 1 }, T("i32", [4, 1])), { becomes: "const" });
  check("iota_unit_axis", false, (t) => t.op("iota", [], { axis: 0 }, T("i32", [4, 1])), { becomes: "iota" });
});

Deno.test("simplify: multiplicative identities", () => {
  check("mul_one", true, (t) => t.op("mul", [t.input("x"), t.k(1)]), { becomes: "input:x" });
  check("mul_one", true, (t) => t.op("mul", [t.k(1), t.input("x")]), { becomes: "input:x" });
  check("mul_one", true, (t) => t.op("mul", [t.input("x"), t.k(1)]), { dtype: "u32", becomes: "input:x" });
  check("mul_one", false, (t) => t.op("mul", [t.input("x"), t.k(1 + 2 ** -40)]), { becomes: "mul" });
  check("mul_minus_one", true, (t) => t.op("mul", [t.k(-1), t.input("x")]), { becomes: "neg" });
  check("mul_minus_one", false, (t) => t.op("mul", [t.input("x"), t.k(-1)]), {
    dtype: "i32",
    becomes: "mul",
  });
  check("div_one", true, (t) => t.op("div", [t.input("x"), t.k(1)]), { becomes: "input:x" });
  check("div_one", true, (t) => t.op("div", [t.input("x"), t.k(1)]), { dtype: "i32", becomes: "input:x" });
  check("div_pow2", true, (t) => t.op("div", [t.input("x"), t.k(4)]), { becomes: "mul" });
  check("div_pow2", true, (t) => t.op("div", [t.input("x"), t.k(-(2 ** -126))]), { becomes: "mul" });
  check("div_pow2", true, (t) => t.op("div", [t.input("x"), t.k(2 ** -14)]), {
    dtype: "f16",
    becomes: "mul",
  });
  check("div_pow2", false, (t) => t.op("div", [t.input("x"), t.k(3)]), { becomes: "div" });
  // 1 / 2^-149 = 2^149 is beyond f32, and 1 / 2^-20 = 2^20 beyond f16.
  check("div_pow2", false, (t) => t.op("div", [t.input("x"), t.k(2 ** -149)]), { becomes: "div" });
  check("div_pow2", false, (t) => t.op("div", [t.input("x"), t.k(2 ** -20)]), {
    dtype: "f16",
    becomes: "div",
  });
  check("div_pow2", false, (t) => t.op("div", [t.input("x"), t.k(4)]), { dtype: "i32", becomes: "div" });
  check("one_div", true, (t) => t.op("div", [t.k(1), t.input("x")]), { becomes: "reciprocal" });
  check("one_div", false, (t) => t.op("div", [t.k(1), t.input("x")]), { dtype: "i32", becomes: "div" });
  check("mul_neg_neg", true, (t) => t.op("mul", [t.op("neg", [t.input("x")]), t.op("neg", [t.input("y")])]), {
    becomes: "mul",
  });
  check(
    "mul_neg_neg",
    false,
    (t) => t.op("mul", [t.op("neg", [t.input("x")]), t.op("neg", [t.input("y")])]),
    {
      dtype: "i32",
    },
  );
});

Deno.test("simplify: additive identities respect signed zeros", () => {
  check("add_zero", true, (t) => t.op("add", [t.input("x"), t.k(-0)]), { becomes: "input:x" });
  check("add_zero", true, (t) => t.op("add", [t.k(-0), t.input("x")]), { becomes: "input:x" });
  check("add_zero", false, (t) => t.op("add", [t.input("x"), t.k(0)]), { becomes: "add" });
  check("add_zero", true, (t) => t.op("add", [t.input("x"), t.k(0)]), { dtype: "i32", becomes: "input:x" });
  check("sub_zero", true, (t) => t.op("sub", [t.input("x"), t.k(0)]), { becomes: "input:x" });
  check("sub_zero", false, (t) => t.op("sub", [t.input("x"), t.k(-0)]), { becomes: "sub" });
  check("zero_sub", true, (t) => t.op("sub", [t.k(-0), t.input("x")]), { becomes: "neg" });
  check("zero_sub", false, (t) => t.op("sub", [t.k(0), t.input("x")]), { becomes: "sub" });
  check("zero_sub", true, (t) => t.op("sub", [t.k(0), t.input("x")]), { dtype: "u32", becomes: "neg" });
  check("add_neg", true, (t) => t.op("add", [t.input("x"), t.op("neg", [t.input("y")])]), { becomes: "sub" });
  check("add_neg", true, (t) => t.op("add", [t.op("neg", [t.input("x")]), t.input("y")]), { becomes: "sub" });
  check("add_neg", true, (t) => t.op("add", [t.input("x"), t.op("neg", [t.input("y")])]), {
    dtype: "u32",
    becomes: "sub",
  });
  check("sub_neg", true, (t) => t.op("sub", [t.input("x"), t.op("neg", [t.input("y")])]), { becomes: "add" });
  check("sub_neg", true, (t) => t.op("sub", [t.input("x"), t.op("neg", [t.input("y")])]), {
    dtype: "i32",
    becomes: "add",
  });
  check("neg_neg", true, (t) => t.op("neg", [t.op("neg", [t.input("x")])]), { becomes: "input:x" });
  check("neg_neg", true, (t) => t.op("neg", [t.op("neg", [t.input("x")])]), {
    dtype: "u32",
    becomes: "input:x",
  });
  check("neg_neg", true, (t) => t.op("neg", [t.op("neg", [t.input("x")])]), {
    dtype: "f16",
    becomes: "input:x",
  });
});

Deno.test("simplify: abs, max/min, logic and comparisons", () => {
  check("abs_of_sign", true, (t) => t.op("abs", [t.op("abs", [t.input("x")])]), { becomes: "abs" });
  check("abs_of_sign", true, (t) => t.op("abs", [t.op("neg", [t.input("x")])]), { becomes: "abs" });
  check("abs_of_sign", true, (t) => t.op("abs", [t.op("neg", [t.input("x")])]), {
    dtype: "i32",
    becomes: "abs",
  });
  check("abs_of_sign", false, (t) => t.op("abs", [t.op("neg", [t.input("x")])]), { dtype: "u32" });
  check("idempotent_binary", true, (t) => t.op("max", [t.input("x"), t.input("x")]), { becomes: "input:x" });
  check("idempotent_binary", true, (t) => t.op("min", [t.input("x"), t.input("x")]), {
    dtype: "f16",
    becomes: "input:x",
  });
  check("idempotent_binary", true, (t) => t.op("and", [t.input("c"), t.input("c")]), {
    dtype: "bool",
    becomes: "input:c",
  });
  check("idempotent_binary", false, (t) => t.op("max", [t.input("x"), t.input("y")]), { becomes: "max" });
  check("logic_const", true, (t) => t.op("and", [t.input("c"), t.k(1)]), {
    dtype: "bool",
    becomes: "input:c",
  });
  check("logic_const", true, (t) => t.op("and", [t.k(0), t.input("c")]), { dtype: "bool", becomes: "const" });
  check("logic_const", true, (t) => t.op("or", [t.input("c"), t.k(0)]), {
    dtype: "bool",
    becomes: "input:c",
  });
  check("logic_const", true, (t) => t.op("or", [t.input("c"), t.k(1)]), { dtype: "bool", becomes: "const" });
  check("compare_same", true, (t) => {
    const x = t.input("x");
    return t.op("and", [t.op("le", [x, x]), t.op("not", [t.op("lt", [x, x])])]);
  }, { dtype: "i32", becomes: "const" });
  // NaN == NaN is false, so a float compared with itself is not a constant.
  check("compare_same", false, (t) => t.op("eq", [t.input("x"), t.input("x")]), { becomes: "eq" });
  check("not_not", true, (t) => t.op("not", [t.op("not", [t.input("c")])]), {
    dtype: "bool",
    becomes: "input:c",
  });
});

Deno.test("simplify: casts and stop_gradient", () => {
  check("cast_same", true, (t) => t.op("cast", [t.input("x")], { to: "f32" }), { becomes: "input:x" });
  check(
    "cast_cast",
    true,
    (t) => t.op("cast", [t.op("cast", [t.input("x")], { to: "f32" })], { to: "f16" }),
    { dtype: "f16", becomes: "input:x" },
  );
  check(
    "cast_cast",
    true,
    (t) => t.op("cast", [t.op("cast", [t.input("c")], { to: "f16" })], { to: "i32" }),
    { dtype: "bool", becomes: "cast" },
  );
  // f32 -> f16 loses bits, so the round trip is not the identity.
  check(
    "cast_cast",
    false,
    (t) => t.op("cast", [t.op("cast", [t.input("x")], { to: "f16" })], { to: "f32" }),
    {
      becomes: "cast",
    },
  );
  check(
    "cast_cast",
    false,
    (t) => t.op("cast", [t.op("cast", [t.input("x")], { to: "f32" })], { to: "i32" }),
    { dtype: "i32", becomes: "cast" },
  );
  check("stop_gradient_twice", true, (t) => t.op("stop_gradient", [t.op("stop_gradient", [t.input("x")])]), {
    becomes: "stop_gradient",
  });
});

Deno.test("simplify: where", () => {
  const c = (t: Tiny) => t.input("c", "bool");
  check("where_same", true, (t) => t.op("where", [c(t), t.input("x"), t.input("x")]), { becomes: "input:x" });
  check("where_same", true, (t) => t.op("where", [c(t), t.k(-0), t.k(-0)]), { becomes: "const" });
  check("where_same", false, (t) => t.op("where", [c(t), t.k(-0), t.k(0)]), { becomes: "where" });
  check("where_const", true, (t) => t.op("where", [t.k(1, "bool"), t.input("x"), t.input("y")]), {
    becomes: "input:x",
  });
  check("where_const", true, (t) => t.op("where", [t.k(0, "bool"), t.input("x"), t.input("y")]), {
    becomes: "input:y",
  });
  check("where_not", true, (t) => t.op("where", [t.op("not", [c(t)]), t.input("x"), t.input("y")]), {
    becomes: "where",
  });
});

Deno.test("simplify: movement identities and compositions", () => {
  const shape = [2, 3, 4];
  const o = { shape };
  check("movement_identity", true, (t) => t.op("reshape", [t.input("x")], { shape: [2, 3, 4] }), {
    ...o,
    becomes: "input:x",
  });
  check("movement_identity", true, (t) => t.op("broadcast", [t.input("x")], { shape: [2, 3, 4] }), {
    ...o,
    becomes: "input:x",
  });
  check("movement_identity", true, (t) => t.op("permute", [t.input("x")], { perm: [0, 1, 2] }), {
    ...o,
    becomes: "input:x",
  });
  check(
    "movement_identity",
    true,
    (t) => t.op("slice", [t.input("x")], { start: [0, 0, 0], end: [2, 3, 4] }),
    { ...o, becomes: "input:x" },
  );
  check("movement_identity", true, (t) => t.op("pad", [t.input("x")], { low: [0, 0, 0], high: [0, 0, 0] }), {
    ...o,
    becomes: "input:x",
  });
  check("movement_identity", true, (t) => t.op("concat", [t.input("x")], { axis: 1 }), {
    ...o,
    becomes: "input:x",
  });
  // A flat vector of one parameter stays a concat: in-place concat makes its buffer the parameter's.
  check(
    "movement_identity",
    false,
    (t) => t.op("concat", [t.op("reshape", [t.input("x")], { shape: [24] })], { axis: 0 }),
    o,
  );
  check(
    "movement_identity",
    false,
    (t) => t.op("slice", [t.input("x")], { start: [0, 1, 0], end: [2, 3, 4] }),
    o,
  );
  check("reshape_reshape", true, (t) => {
    const r = t.op("reshape", [t.input("x")], { shape: [6, 4] });
    return t.op("reshape", [r], { shape: [24] });
  }, { ...o, becomes: "reshape" });
  check("reshape_reshape", true, (t) => {
    const r = t.op("reshape", [t.input("x")], { shape: [6, 4] });
    return t.op("reshape", [r], { shape: [2, 3, 4] });
  }, { ...o, becomes: "input:x" });
  const twice = check("permute_permute", true, (t) => {
    const p = t.op("permute", [t.input("x")], { perm: [2, 0, 1] });
    return t.op("permute", [p], { perm: [0, 2, 1] });
  }, { ...o, becomes: "permute" });
  assert.deepEqual(twice.node(twice.outputs.get("out")!).attrs.perm, [2, 1, 0]);
  check("permute_permute", true, (t) => {
    const p = t.op("permute", [t.input("x")], { perm: [2, 0, 1] });
    return t.op("permute", [p], { perm: [1, 2, 0] });
  }, { ...o, becomes: "input:x" });
  check("broadcast_broadcast", true, (t) => {
    const b = t.op("broadcast", [t.input("x", "f32", [3, 1])], { shape: [1, 3, 4] });
    return t.op("broadcast", [b], { shape: [2, 3, 4] });
  }, { ...o, becomes: "broadcast" });
  check("slice_slice", true, (t) => {
    const s = t.op("slice", [t.input("x")], { start: [1, 0, 1], end: [2, 3, 4] });
    return t.op("slice", [s], { start: [0, 1, 1], end: [1, 3, 2] });
  }, { ...o, becomes: "slice" });
  check("matmul_absorb_transpose", true, (t) => {
    const a = t.op("permute", [t.input("x")], { perm: [0, 2, 1] }); // [2,4,3]
    return t.op("matmul", [a, t.input("y")], { transpose_a: false, transpose_b: false }); // [2,4,3] @ [2,3,4]
  }, { ...o, becomes: "matmul" });
  check("matmul_absorb_transpose", true, (t) => {
    const b = t.op("permute", [t.input("y")], { perm: [0, 2, 1] });
    return t.op("matmul", [t.input("x"), b], { transpose_a: false, transpose_b: false });
  }, { ...o, becomes: "matmul" });
  // Permuting batch axes is not a transpose.
  check("matmul_absorb_transpose", false, (t) => {
    const a = t.op("permute", [t.input("x", "f32", [3, 3, 3])], { perm: [1, 0, 2] });
    return t.op("matmul", [a, t.input("y", "f32", [3, 3, 3])], { transpose_a: false, transpose_b: false });
  }, { ...o, becomes: "matmul" });
});

Deno.test("simplify: reductions over size-1 axes", () => {
  const o = { shape: [3, 1, 4, 1] };
  check("reduce_unit_axes", true, (t) => t.op("reduce_sum", [t.input("x")], { axes: [1, 2] }), {
    ...o,
    becomes: "reduce_sum",
  });
  check("reduce_unit_axes", true, (t) => t.op("reduce_max", [t.input("x")], { axes: [1, 3] }), {
    ...o,
    becomes: "input:x",
  });
  check("reduce_unit_axes", true, (t) => t.op("reduce_sum", [t.input("x")], { axes: [1, 3] }), {
    ...o,
    becomes: "reduce_sum",
  });
  // A sum over one size-1 axis still adds to 0, which turns -0 into +0: not the identity.
  check("reduce_unit_axes", false, (t) => t.op("reduce_sum", [t.input("x")], { axes: [1] }), {
    ...o,
    becomes: "reduce_sum",
  });
});

Deno.test("simplify: rules build on each other's results in one sweep (fixed point)", () => {
  const t = new Tiny("f32", [2, 3, 4]);
  const x = t.input("x");
  // neg(x * -1) -> neg(neg x) -> x; the reshapes collapse to the identity; * (2 * 0.5) folds to * 1.
  const m = t.op("mul", [x, t.k(-1)]);
  const r = t.op("reshape", [t.op("reshape", [t.op("neg", [m])], { shape: [6, 4] })], { shape: [2, 3, 4] });
  const one = t.op("mul", [t.k(2), t.k(0.5)]);
  t.g.setOutput("out", t.op("mul", [r, one]));
  const first = simplifyGraph(t.g);
  const out = first.graph.node(first.graph.outputs.get("out")!);
  assert.equal(out.op, "input");
  assert.equal(simplifyGraph(first.graph).graph, first.graph, "a second sweep finds nothing");
  assert.deepEqual(
    [...first.fired.keys()].sort(),
    ["fold_elementwise", "mul_minus_one", "mul_one", "neg_neg", "reshape_reshape", "movement_identity"]
      .sort(),
  );
});

Deno.test("simplify: an unchanged graph comes back as the same object; locations follow rewrites", () => {
  const g = new Graph("g");
  const x = g.add("input", [], { name: "x" }, T("f32", [3]), "m.ts:1");
  const y = g.add("exp", [x], {}, undefined, "m.ts:2");
  g.setOutput("y", y);
  assert.equal(simplifyGraph(g).graph, g);
  assert.equal(cseGraph(g).graph, g);
  assert.equal(dceGraph(g).graph, g);
  const h = new Graph("h");
  const a = h.add("input", [], { name: "x" }, T("f32", [3]), "m.ts:1");
  const b = h.add("div", [a, h.add("const", [], { value: 2 }, T("f32", [3]))], {}, undefined, "m.ts:7");
  h.setOutput("y", b);
  const s = simplifyGraph(h).graph;
  const out = s.node(s.outputs.get("y")!);
  assert.equal(out.op, "mul");
  assert.equal(out.loc, "m.ts:7");
});

// ---- CSE and DCE ------------------------------------------------------------------------------------

Deno.test("cse: merges equal nodes (commutative operands too), and nothing else", () => {
  const t = new Tiny("f32", [4]);
  const x = t.input("x"), y = t.input("y");
  const key = t.input("key", "u32", [2]);
  const a1 = t.op("add", [x, y]), a2 = t.op("add", [y, x]); // same sum
  const m1 = t.op("max", [x, y]), m2 = t.op("max", [y, x]); // max(+0,-0) != max(-0,+0) in the reference
  const s1 = t.op("sub", [x, y]), s2 = t.op("sub", [y, x]);
  const z1 = t.k(0), z2 = t.k(-0), z3 = t.k(0); // -0 and +0 differ
  const n1 = t.k(NaN), n2 = t.k(NaN);
  const r1 = t.op("random_uniform", [key], { stream: 3 }, T("f32", [4]));
  const r2 = t.op("random_uniform", [key], { stream: 3 }, T("f32", [4]));
  const r3 = t.op("random_uniform", [key], { stream: 4 }, T("f32", [4]));
  const outs = { a1, a2, m1, m2, s1, s2, z1, z2, z3, n1, n2, r1, r2, r3 };
  for (const [k, v] of Object.entries(outs)) t.g.setOutput(k, v);
  const { graph, merged } = cseGraph(t.g);
  const id = (k: string) => graph.outputs.get(k)!;
  assert.equal(id("a1"), id("a2"));
  assert.notEqual(id("m1"), id("m2"));
  assert.notEqual(id("s1"), id("s2"));
  assert.equal(id("z1"), id("z3"));
  assert.notEqual(id("z1"), id("z2"));
  assert.equal(id("n1"), id("n2"));
  assert.equal(id("r1"), id("r2"));
  assert.notEqual(id("r1"), id("r3"));
  assert.equal(merged, 4);
  assert.equal(graph.nodes.length, t.g.nodes.length - 4);
  assertSameOutputs(t.g, graph, 31);
  assert.equal(cseGraph(graph).graph, graph, "idempotent");
});

Deno.test("cse: duplicates whose operands are duplicates merge transitively; the first location stays", () => {
  const g = new Graph("g");
  const x = g.add("input", [], { name: "x" }, T("f32", [5]));
  const e1 = g.add("exp", [x], {}, undefined, "a.ts:1"), e2 = g.add("exp", [x], {}, undefined, "a.ts:2");
  const t1 = g.add("tanh", [e1], {}, undefined, "a.ts:3"), t2 = g.add("tanh", [e2], {}, undefined, "a.ts:4");
  g.setOutput("y", g.add("mul", [t1, t2]));
  const { graph, merged } = cseGraph(g);
  assert.equal(merged, 2);
  const y = graph.node(graph.outputs.get("y")!);
  assert.equal(y.inputs[0], y.inputs[1]);
  assert.equal(graph.node(y.inputs[0]).loc, "a.ts:3");
  assertSameOutputs(g, graph, 5);
});

Deno.test("dce: drops what no output needs, keeps every input and param and the outputs' order", () => {
  const g = new Graph("g");
  const x = g.add("input", [], { name: "x" }, T("f32", [3]));
  g.add("input", [], { name: "unused_input" }, T("i32", [2]));
  const w = g.add("param", [], { name: "w", init: "zeros" }, T("f32", [3]));
  g.add("param", [], { name: "unused_param", init: "ones" }, T("f32", [7]));
  const dead = g.add("exp", [x]);
  g.add("mul", [dead, w]);
  const live = g.add("add", [x, w]);
  g.setOutput("b", g.add("tanh", [live]));
  g.setOutput("a", live);
  const { graph, removed } = dceGraph(g);
  assert.equal(removed, 2);
  assert.deepEqual(graph.nodes.map((n) => n.op), ["input", "input", "param", "param", "add", "tanh"]);
  assert.deepEqual([...graph.outputs.keys()], ["b", "a"]);
  assert.deepEqual([...graph.sources("input").keys()], ["x", "unused_input"]);
  assert.deepEqual([...graph.sources("param").keys()], ["w", "unused_param"]);
  assertSameOutputs(g, graph, 9);
  assert.equal(dceGraph(graph).graph, graph, "idempotent");
});

// ---- randomized graphs ----------------------------------------------------------------------------

const CONST_POOL = [1, -1, 0, -0, 2, 0.5, 4, 0.25, 3, 0.1, NaN, Infinity];

/**
 * A random graph of 40 steps over f32 values, built to hit the rules: constants from a pool of
 * identities and awkward values, chains of negations, reshapes, permutes, broadcasts and slices,
 * transposed matmuls, reductions, casts through f16, selects, and repeated subexpressions.
 */
function randomGraph(r: Rng, idx: number): Graph {
  const g = new Graph(`random${idx}`);
  const vals: NodeId[] = [];
  const pick = (pred: (id: NodeId) => boolean = () => true): NodeId | undefined => {
    const c = vals.filter(pred);
    return c.length ? c[r.int(0, c.length)] : undefined;
  };
  const type = (id: NodeId) => g.nodes[id].type;
  const push = (id: NodeId) => (vals.push(id), id);
  const konst = (like: NodeId, v = CONST_POOL[r.int(0, CONST_POOL.length)]) =>
    g.add("const", [], { value: v }, type(like));
  push(g.add("input", [], { name: "x" }, T("f32", [2, 3, 4])));
  push(g.add("input", [], { name: "y" }, T("f32", [2, 3, 4])));
  push(g.add("input", [], { name: "s" }, T("f32", [3, 1])));
  const cond = g.add("input", [], { name: "c" }, T("bool", [2, 3, 4]));
  for (let step = 0; step < 40; step++) {
    const x = pick()!;
    const t = type(x);
    const choice = r.int(0, 14);
    try {
      switch (choice) {
        case 0:
        case 1: { // binary with a same-typed value or a constant
          const other = r.uniform() < 0.5
            ? pick((id) => typeToString(type(id)) === typeToString(t))!
            : konst(x);
          const op = (["add", "sub", "mul", "div", "max", "min"] as const)[r.int(0, 6)];
          push(r.uniform() < 0.5 ? g.add(op, [x, other]) : g.add(op, [other, x]));
          break;
        }
        case 2: // unary, sometimes twice
          push(g.add(["neg", "abs", "tanh", "stop_gradient", "neg"][r.int(0, 5)], [x]));
          break;
        case 3: { // reshape (and maybe back)
          const n = numel(t.shape);
          const shapes = [[n], [...t.shape, 1], [1, ...t.shape], [...t.shape].reverse()];
          const rs = g.add("reshape", [x], { shape: shapes[r.int(0, shapes.length)] });
          push(r.uniform() < 0.5 ? g.add("reshape", [rs], { shape: [...t.shape] }) : rs);
          break;
        }
        case 4: { // permute, maybe twice
          const perm = [...t.shape.keys()].sort(() => r.uniform() - 0.5);
          const p = g.add("permute", [x], { perm });
          const perm2 = [...t.shape.keys()].sort(() => r.uniform() - 0.5);
          push(r.uniform() < 0.5 ? g.add("permute", [p], { perm: perm2 }) : p);
          break;
        }
        case 5: { // broadcast a reduction back to its operand's shape, sometimes in two steps
          const axes = [...t.shape.keys()].filter(() => r.uniform() < 0.5);
          if (!axes.length) break;
          const red = g.add(r.uniform() < 0.5 ? "reduce_sum" : "reduce_max", [x], { axes });
          const mid = g.add("broadcast", [red], { shape: [1, ...type(red).shape] });
          push(g.add("broadcast", [r.uniform() < 0.5 ? mid : red], { shape: [1, ...t.shape] }));
          break;
        }
        case 6: { // slices of slices
          const start = t.shape.map((d) => r.int(0, d));
          const s1 = g.add("slice", [x], { start, end: [...t.shape] });
          const sh = type(s1).shape;
          push(
            g.add("slice", [s1], {
              start: sh.map(() => 0),
              end: sh.map((d) => r.int(Math.min(1, d), d + 1)),
            }),
          );
          break;
        }
        case 7: { // matmul with transposes written as permutes
          if (t.shape.length !== 3) break;
          const sw = (id: NodeId) => g.add("permute", [id], { perm: [0, 2, 1] });
          const [a, b] = r.uniform() < 0.5 ? [sw(x), x] : [x, sw(x)];
          push(g.add("matmul", [a, b], { transpose_a: false, transpose_b: false }));
          break;
        }
        case 8: // round trip through f16, or f16 -> f32 -> f16
          push(g.add("cast", [g.add("cast", [x], { to: "f16" })], { to: "f32" }));
          break;
        case 9: { // select with a condition, a constant condition or not(condition)
          if (typeToString(t) !== "f32[2,3,4]") break;
          const cs = [
            cond,
            g.add("const", [], { value: r.int(0, 2) }, T("bool", [2, 3, 4])),
            g.add("not", [cond]),
          ];
          const other = r.uniform() < 0.3 ? x : pick((id) => typeToString(type(id)) === "f32[2,3,4]")!;
          push(g.add("where", [cs[r.int(0, 3)], x, other]));
          break;
        }
        case 10: { // a duplicate of an earlier node
          const n = g.nodes[pick((id) => g.nodes[id].op !== "input")!];
          if (n) push(g.add(n.op, n.inputs, n.attrs, n.type));
          break;
        }
        case 11: // constant arithmetic
          push(g.add("mul", [x, g.add("add", [konst(x), konst(x)])]));
          break;
        case 12: // the broadcast input
          push(g.add("broadcast", [vals[2]], { shape: [2, 3, 4] }));
          break;
        case 13: // x / 2^k, 1 / x
          push(g.add("div", r.uniform() < 0.5 ? [x, konst(x, 2 ** r.int(-3, 4))] : [konst(x, 1), x]));
          break;
      }
    } catch (e) {
      // A few random combinations are ill-typed (a slice that came out empty, say); skip them.
      if (!(e instanceof Error && e.name === "IRError")) throw e;
    }
  }
  // Three outputs: the last value and two random ones; whatever else is dead code.
  g.setOutput("last", vals[vals.length - 1]);
  g.setOutput("o1", pick()!);
  g.setOutput("o2", pick()!);
  return g;
}

Deno.test("simplify + cse + dce: random graphs give bit-identical results in f64 and f32", () => {
  const r = seededRandom(20261122);
  const fired = new Set<string>();
  let before = 0, after = 0;
  for (let i = 0; i < 120; i++) {
    const g = randomGraph(r, i);
    const s = simplifyGraph(g);
    for (const k of s.fired.keys()) fired.add(k);
    assert.equal(
      simplifyGraph(s.graph).graph,
      s.graph,
      `random${i}: a second simplify sweep changes nothing`,
    );
    const { graph } = runPipeline(g, [simplify, cse, dce], quietContext());
    before += g.nodes.length;
    after += graph.nodes.length;
    assertSameOutputs(g, graph, 1000 + i, 2);
  }
  // The generator must keep exercising most of the table, or this test would prove little.
  assert.ok(fired.size >= 18, `only ${fired.size} rules fired: ${[...fired].join(", ")}`);
  assert.ok(after < before * 0.9, `nodes ${before} -> ${after}`);
});

// ---- BERT ---------------------------------------------------------------------------------------------

Deno.test("simplify + cse + dce: tiny BERT training graph gives the same loss and gradients", () => {
  const [B, S, P] = [2, 8, 3];
  const fwd = bertTiny.build({
    head: "pretraining",
    mode: "train",
    batchSize: B,
    seqLen: S,
    maxPredictions: P,
  });
  const g = differentiate(fwd, "loss");
  const { graph, timings } = runPipeline(g, [simplify, cse, dce], quietContext());
  assert.ok(graph.nodes.length < g.nodes.length * 0.95, `${g.nodes.length} -> ${graph.nodes.length} nodes`);
  assert.ok(timings.every((t) => t.changed));
  const r = seededRandom(77);
  const vocab = bertTiny.config.vocab_size;
  const feeds: Record<string, ArrayLike<number>> = {
    input_ids: Array.from({ length: B * S }, () => r.int(1, vocab)),
    token_type_ids: Array.from({ length: B * S }, (_, i) => (i % S >= S / 2 ? 1 : 0)),
    attention_mask: Array.from({ length: B * S }, (_, i) => (i % S < S - 2 || i < S ? 1 : 0)),
    masked_lm_positions: Array.from({ length: B * P }, () => r.int(0, S)),
    masked_lm_ids: Array.from({ length: B * P }, (_, i) => (i === B * P - 1 ? -1 : r.int(1, vocab))),
    next_sentence_labels: [1, 0],
    rng_key: [r.u32(), 5],
  };
  // Parameters scaled up from BERT's 0.02 so that activations are far from trivial.
  for (const [name, w] of initParams(g, r.u32())) feeds[name] = Float64Array.from(w, (v) => 25 * v);
  const want = evaluate(g, feeds, { precision: "f64" });
  const got = evaluate(graph, feeds, { precision: "f64" });
  assert.deepEqual([...got.keys()], [...want.keys()]);
  for (const [name, w] of want) {
    const v = got.get(name)!;
    for (let i = 0; i < w.length; i++) {
      if (!Object.is(v[i], w[i])) assert.fail(`${name}[${i}]: ${v[i]} vs ${w[i]}`);
    }
  }
  assert.ok(Number.isFinite(want.get("loss")![0]) && want.get("loss")![0] > 0);
});

Deno.test("simplify: every rule in the table was seen firing by the tests above", () => {
  const missing = RULES.map((r) => r.name).filter((n) => !firedSomewhere.has(n));
  assert.deepEqual(missing, [], `rules without a firing test: ${missing.join(", ")}`);
  for (const rule of RULES) assert.ok(rule.why.length > 10 && rule.ops.length > 0, rule.name);
  assert.equal(new Set(RULES.map((r) => r.name)).size, RULES.length, "rule names are unique");
  assert.ok(
    RULES.every((r) => r.ops.every((op) => op !== "input" && op !== "param")),
    "sources are never rewritten",
  );
});
