/**
 * The reference interpreter: runs any tensor graph on the CPU, slowly and obviously. It is the numeric oracle
 * for every generated kernel. Precision: in "f64" mode float math is done in doubles and f32 nodes are not
 * rounded (for gradient checks); in "f32" mode every f32 node's result is rounded to f32. In both modes f16
 * and bf16 nodes are rounded to their format after each op (round to nearest even), which emulates
 * low-precision storage faithfully; reductions and matmuls accumulate in f64 before that single rounding.
 */
import { type DType, type Graph, IRError, type NodeId, numel, typeToString } from "../../ir/mod.ts";
import { roundBF16, roundF16 } from "../../numeric/half.ts";
import { type Buf, castValue, runOp } from "../../numeric/reference_ops.ts";

export type Precision = "f64" | "f32";

export interface EvalOptions {
  precision?: Precision;
  /** Output names to return (default: all outputs of the graph). */
  outputs?: string[];
}

function roundInPlace(x: Buf, dtype: DType, precision: Precision): Buf {
  switch (dtype) {
    case "f32":
      if (precision === "f32") { for (let i = 0; i < x.length; i++) x[i] = Math.fround(x[i]); }
      return x;
    case "f16":
      for (let i = 0; i < x.length; i++) x[i] = roundF16(x[i]);
      return x;
    case "bf16":
      for (let i = 0; i < x.length; i++) x[i] = roundBF16(x[i]);
      return x;
    default:
      for (let i = 0; i < x.length; i++) x[i] = castValue(x[i], dtype);
      return x;
  }
}

/**
 * Evaluates the graph's nodes `want` and returns their values. Buffers are dropped after their last use,
 * so peak memory stays near the live set, not the whole graph.
 */
export function evaluateNodes(
  g: Graph,
  feeds: Record<string, ArrayLike<number>>,
  want: readonly NodeId[],
  precision: Precision = "f64",
): Buf[] {
  const needed = new Uint8Array(g.nodes.length);
  for (const id of want) needed[id] = 1;
  for (let i = g.nodes.length - 1; i >= 0; i--) {
    if (needed[i]) { for (const j of g.nodes[i].inputs) needed[j] = 1; }
  }
  const lastUse = new Int32Array(g.nodes.length).fill(-1);
  for (const n of g.nodes) if (needed[n.id]) { for (const j of n.inputs) lastUse[j] = n.id; }
  const keep = new Set(want);
  const vals: (Buf | undefined)[] = new Array(g.nodes.length);
  for (const n of g.nodes) {
    if (!needed[n.id]) continue;
    let v: Buf;
    if (n.op === "input" || n.op === "param") {
      const name = n.attrs.name as string;
      const fed = feeds[name];
      if (fed === undefined) {
        throw new IRError(`no value fed for ${n.op} '${name}' (${typeToString(n.type)})`);
      }
      if (fed.length !== numel(n.type.shape)) {
        throw new IRError(
          `${n.op} '${name}' expects ${numel(n.type.shape)} values (${
            typeToString(n.type)
          }), got ${fed.length}`,
        );
      }
      v = Float64Array.from(fed);
    } else {
      const ins = n.inputs.map((i) => vals[i]!);
      v = runOp(n.op, { node: n, ins, inTypes: n.inputs.map((i) => g.nodes[i].type) });
      // Ops that pass their operand through unchanged (reshape, stop_gradient) share its buffer; copy
      // before rounding would alter a value that is still in use.
      if (ins.includes(v)) v = v.slice();
    }
    vals[n.id] = roundInPlace(v, n.type.dtype, precision);
    for (const j of n.inputs) if (lastUse[j] === n.id && !keep.has(j)) vals[j] = undefined;
  }
  return want.map((id) => vals[id]!);
}

/** Evaluates the named outputs of g. Feeds are keyed by the name of each input and param node. */
export function evaluate(
  g: Graph,
  feeds: Record<string, ArrayLike<number>>,
  opts: EvalOptions = {},
): Map<string, Float64Array> {
  const names = opts.outputs ?? [...g.outputs.keys()];
  const ids = names.map((name) => {
    const id = g.outputs.get(name);
    if (id === undefined) throw new IRError(`graph '${g.name}' has no output '${name}'`);
    return id;
  });
  const vals = evaluateNodes(g, feeds, ids, opts.precision ?? "f64");
  return new Map(names.map((name, i) => [name, vals[i]]));
}
