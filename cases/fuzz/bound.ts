/**
 * The fuzzer's tolerance model: for every node of a graph, a per-element bound on how far a correct
 * device result may be from the f64 reference, propagated through the graph in f64 from the reference
 * values themselves (a running forward error analysis). A device result outside its bound is a bug, not
 * noise: the bound follows the graph's conditioning (sums of |terms| for reductions and GEMMs, the
 * condition of exp, log, division and square roots at the actual operands, a comparison or select that
 * may flip when its operands are within their bounds of each other) instead of one absolute number.
 *
 * Local errors, per node (then propagated): one f32 rounding of every computed f32 value (a kernel computes
 * in f32; the f64 reference does not round), the accuracy the WGSL spec grants each built-in (exp 3 + 2|x|
 * ulp, log 3 ulp or 2^-21 absolute, division 2.5 ulp, inverseSqrt 2 ulp; tanh and erf absolute), both the
 * reference's and the device's rounding of f16 values, one more f16 rounding where the plan's storage
 * policy narrows an f32 value (BoundOptions.narrowed), and for sums (n - 1)·u·Σ|x| of f32 accumulation in
 * any order. Local errors are taken at the device's possible magnitude (|value| + bound) and multiplied
 * by SAFETY.
 */
import { type Graph, isFloat, isInt, type Node, type NodeId, numel } from "../../ir/mod.ts";
import { type Buf, runOp } from "../../numeric/reference_ops.ts";

/** f32 unit roundoff; half an f16 / bf16 ulp (relative) and of the smallest subnormal (absolute). */
const U32 = 2 ** -24;
const HALF: Record<string, [number, number]> = { f16: [2 ** -11, 2 ** -25], bf16: [2 ** -8, 2 ** -134] };
/**
 * Margin on every local error. The propagation rules are worst cases including their second-order terms,
 * and local errors are taken at the device's possible magnitude (|value| + bound), so this only covers
 * first-order sum bounds ((n - 1)u for γ_{n-1}) and the spec's rounding of its own ulp counts.
 */
export const SAFETY = 1.25;

export interface BoundOptions {
  /** f32 values the plan stores as f16 (compiled.storage.narrowed, ids of the graph bounded). */
  readonly narrowed?: ReadonlySet<NodeId>;
}

/**
 * A node's own rounding, for a reference value r whose device value may be anywhere in r ± prop. A
 * low-precision node is rounded by the reference after every op and by the device where it stores or
 * casts: both roundings count. An f32 node is rounded by the device only (the f64 reference keeps it
 * exact), and once more to f16 where the plan narrows its storage. `passes`: the op hands on an operand's
 * value, already in its dtype.
 */
function ownError(dtype: string, r: number, prop: number, narrowed: boolean, passes: boolean): number {
  const ref = Math.abs(r), dev = ref + prop;
  const half = HALF[dtype];
  if (half) return passes ? 0 : half[0] * (ref + dev) + 2 * half[1];
  if (dtype !== "f32") return 0;
  return (passes ? 0 : U32 * dev) + (narrowed ? HALF.f16[0] * dev + HALF.f16[1] : 0);
}

/**
 * Extra error of a built-in beyond one rounding at a result of magnitude up to `dev`, from the WGSL spec's
 * accuracy table (CUDA's are tighter).
 */
function builtinError(op: string, x: number, dev: number): number {
  const ulp = U32 * dev;
  switch (op) {
    case "exp":
      return (3 + 2 * Math.abs(x)) * ulp;
    case "log":
      return x >= 0.5 && x <= 2 ? 2 ** -21 : 3 * ulp;
    case "div":
    case "reciprocal":
      return 2.5 * ulp;
    case "sqrt":
    case "rsqrt":
      return 4 * ulp;
    // tanh through exp (drivers) is accurate in absolute terms near 0; erf is our fit (1e-7, with exp in it).
    case "tanh":
      return 2 ** -21 + 4 * ulp;
    case "erf":
      return 4e-7;
    default:
      return 0;
  }
}

const map = (n: number, f: (i: number) => number): Buf => {
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = f(i);
  return out;
};
/** |x| + e elementwise: the largest magnitude the device's operand may have. */
const reach = (x: Buf, e: Buf): Buf => x.map((v, i) => Math.abs(v) + e[i]);

/**
 * |f(x) - f(a)| over the device's possible operand x in [max(a - ea, floor), a + ea] for a monotone f
 * (Infinity when that interval reaches `domain`, the end of f's domain).
 */
function monotone(
  f: (x: number) => number,
  a: number,
  ea: number,
  floor = -Infinity,
  domain = -Infinity,
): number {
  if (ea === 0) return 0;
  const lo = Math.max(a - ea, floor);
  if (!(lo > domain)) return Infinity;
  const r = f(a);
  return Math.max(Math.abs(f(lo) - r), Math.abs(f(a + ea) - r));
}

/**
 * Propagated error of an elementwise op at element i, before its own rounding: from its operands'
 * values `v` and bounds `e`.
 */
function elementwise(op: string, v: Buf[], e: Buf[], r: Buf, i: number, floors: number[]): number {
  const a = v[0][i], ea = e[0][i], fa = floors[0];
  switch (op) {
    case "neg":
    case "abs":
    case "stop_gradient":
    case "not":
      return ea;
    case "exp":
      return ea === 0 ? 0 : Math.abs(r[i]) * Math.expm1(ea);
    case "log":
      return monotone(Math.log, a, ea, fa, 0);
    case "sqrt":
      // |√(a+δ) - √a| <= min(√|δ|, |δ|/√a) while a + δ >= 0 (always, for an operand whose floor is 0:
      // a sum of squares); a negative operand on the device would be NaN.
      if (ea === 0) return 0;
      return Math.max(a - ea, fa) < 0 ? Infinity : Math.min(Math.sqrt(ea), ea / Math.sqrt(a));
    case "rsqrt":
      return monotone((x) => 1 / Math.sqrt(x), a, ea, fa, 0);
    case "reciprocal":
      return a > 0 ? monotone((x) => 1 / x, a, ea, fa, 0) : monotone((x) => 1 / x, -a, ea, -Infinity, 0);
    case "tanh":
      return ea;
    case "erf":
      return ea * 2 / Math.sqrt(Math.PI);
    case "add":
    case "sub":
      return ea + e[1][i];
    case "mul": {
      const b = v[1][i], eb = e[1][i];
      return Math.abs(a) * eb + Math.abs(b) * ea + ea * eb;
    }
    case "div": {
      // |(a+δa)/(b+δb) - a/b| = |δa·b - a·δb| / (|b|·|b+δb|), with |b+δb| at least the denominator's
      // lowest reachable magnitude.
      const b = v[1][i], eb = e[1][i];
      if (ea === 0 && eb === 0) return 0;
      const low = b > 0 ? Math.max(b - eb, floors[1]) : -b - eb;
      return low <= 0 ? Infinity : (ea * Math.abs(b) + Math.abs(a) * eb) / (Math.abs(b) * low);
    }
    case "max":
    case "min":
    case "and":
    case "or":
      return Math.max(ea, e[1][i]);
    case "eq":
    case "ne":
    case "lt":
    case "le":
    case "gt":
    case "ge":
      // The comparison may flip when the operands are within their bounds of each other.
      return Math.abs(a - v[1][i]) <= ea + e[1][i] && ea + e[1][i] > 0 ? 1 : 0;
    case "where": {
      const x = v[1][i], y = v[2][i], ex = e[1][i], ey = e[2][i];
      if (ea > 0) return Math.max(ex, ey) + Math.abs(x - y);
      return a ? ex : ey;
    }
    default:
      throw new Error(`fuzz bound: no rule for elementwise op ${op}`);
  }
}

/** Sources fed exactly, and ops whose result is one of their operands' values in the same dtype (a const
 * is not one: the reference keeps its f64 value where a kernel spells it in f32). */
const PASS_THROUGH = new Set([
  "input",
  "param",
  "iota",
  "random_uniform",
  "reshape",
  "broadcast",
  "permute",
  "slice",
  "pad",
  "concat",
  "gather",
  "stop_gradient",
  "neg",
  "abs",
  "max",
  "min",
  "where",
  "reduce_max",
]);
/**
 * A lower bound of every element of each node whatever rounding does (-Infinity when none is known), by
 * structure — squares and sums of them are >= 0, max(1, x) >= 1 — or, for inputs, from their fed values
 * (what the device reads). errorBounds raises it to the lowest value any element can reach (value - bound)
 * when that is higher, so sqrt of a sum of squares near 0, or 1/max(1, norm), is bounded instead of
 * refused as possibly NaN or infinite.
 */
function structuralFloor(g: Graph, n: Node, fl: readonly number[], vals: readonly Buf[]): number {
  const nonneg = (x: number) => (x >= 0 ? 0 : -Infinity);
  const [a, b, c] = n.inputs.map((i) => fl[i]);
  switch (n.op) {
    case "const":
      return n.attrs.value as number;
    case "input":
    case "param":
      return vals[n.id].reduce((m, x) => Math.min(m, x), Infinity);
    case "random_uniform":
    case "abs":
    case "exp":
    case "sqrt":
    case "rsqrt":
      return 0;
    case "mul":
      return n.inputs[0] === n.inputs[1] ? 0 : a >= 0 && b >= 0 ? a * b : -Infinity;
    case "add":
      return a + b;
    case "div":
      return a >= 0 && b > 0 ? 0 : -Infinity;
    case "reciprocal":
      return nonneg(a);
    case "reduce_sum":
    case "scatter_add":
      return nonneg(n.op === "scatter_add" ? b : a);
    case "max":
      return Math.max(a, b);
    case "min":
      return Math.min(a, b);
    case "where":
      return Math.min(b, c);
    case "cast":
      return g.nodes[n.inputs[0]].type.dtype === "bool" ? 0 : a;
    case "pad":
      return Math.min(a, 0);
    case "concat":
      return Math.min(...n.inputs.map((i) => fl[i]));
    case "reshape":
    case "broadcast":
    case "permute":
    case "slice":
    case "gather":
    case "stop_gradient":
    case "reduce_max":
      return a;
    default:
      return -Infinity;
  }
}

const SELF_EXACT = new Set(["sub", "eq", "ne", "lt", "le", "gt", "ge"]);

/** Elements each output element of a reduction sums (the product of the reduced extents). */
function reducedCount(n: Node, inShape: readonly number[]): number {
  return (n.attrs.axes as number[]).reduce((c, a) => c * inShape[a], 1);
}

/**
 * Per-node, per-element error bounds of graph g evaluated at `vals` (every node's f64 reference value,
 * as evaluateNodes returns them for all ids).
 */
export function errorBounds(g: Graph, vals: readonly Buf[], opts: BoundOptions = {}): Buf[] {
  const bounds: Buf[] = [];
  const floors: number[] = [];
  for (const n of g.nodes) {
    const size = numel(n.type.shape);
    const v = n.inputs.map((i) => vals[i]);
    const e = n.inputs.map((i) => bounds[i]);
    const inTypes = n.inputs.map((i) => g.nodes[i].type);
    const r = vals[n.id];
    // The op itself on other buffers (reshape hands back its operand: copy, since the bound is added to).
    const same = (ins: Buf[]) => {
      const out = runOp(n.op, { node: n, ins, inTypes });
      return ins.includes(out) ? out.slice() : out;
    };
    let prop: Buf;
    switch (n.op) {
      case "input":
      case "param":
      case "iota":
      case "random_uniform":
        // Feeds are exact in their dtype; iota and Philox draws are bit-identical everywhere.
        prop = new Float64Array(size);
        break;
      case "const":
        prop = new Float64Array(size);
        break;
      case "reshape":
      case "broadcast":
      case "permute":
      case "slice":
      case "pad":
      case "concat":
        prop = same(e);
        break;
      case "cast":
        // To an integer: truncation may step when the operand's interval crosses an integer.
        prop = isInt(n.type.dtype) ? map(size, (i) => monotone(Math.trunc, v[0][i], e[0][i])) : e[0].slice();
        break;
      case "gather":
        prop = same([e[0], v[1]]);
        break;
      case "scatter_add": {
        const k = numel(inTypes[0].shape);
        const sumAbs = same([v[0], reach(v[1], e[1])]);
        const se = same([v[0], e[1]]);
        prop = map(size, (i) => se[i] + SAFETY * (k - 1) * U32 * sumAbs[i]);
        break;
      }
      case "reduce_sum": {
        const k = reducedCount(n, inTypes[0].shape);
        const sumAbs = same([reach(v[0], e[0])]);
        const se = same([e[0]]);
        prop = map(size, (i) => se[i] + SAFETY * (k - 1) * U32 * sumAbs[i]);
        break;
      }
      case "reduce_max": {
        // The device's max lies between the row's largest lower end and its largest upper end: only
        // elements that can reach the top count (a masked score's large bound does not).
        const hi = same([v[0].map((x, i) => x + e[0][i])]), lo = same([v[0].map((x, i) => x - e[0][i])]);
        prop = map(size, (i) => Math.max(hi[i] - r[i], r[i] - lo[i]));
        break;
      }
      case "matmul": {
        const [A, B] = [v[0].map(Math.abs), v[1].map(Math.abs)];
        const k = n.attrs.transpose_a ? inTypes[0].shape.at(-2)! : inTypes[0].shape.at(-1)!;
        const t1 = same([A, e[1]]), t2 = same([e[0], B]), t3 = same([e[0], e[1]]);
        const t4 = same([reach(v[0], e[0]), reach(v[1], e[1])]);
        prop = map(size, (i) => t1[i] + t2[i] + t3[i] + SAFETY * (k - 1) * U32 * t4[i]);
        break;
      }
      default: {
        // An op of one value with itself (x - x, x > x) is exact: the device computes both operands alike.
        if (n.inputs.length === 2 && n.inputs[0] === n.inputs[1] && SELF_EXACT.has(n.op)) {
          prop = new Float64Array(size);
          break;
        }
        const fl = n.inputs.map((j) => floors[j]);
        prop = map(size, (i) => {
          const p = elementwise(n.op, v, e, r, i, fl);
          return p + SAFETY * builtinError(n.op, v[0][i], Math.abs(r[i]) + p);
        });
      }
    }
    // The node's own rounding (inputs and parameters arrive exact; an output or a feed is never narrowed).
    // Ops that pass on one of their operands' values round nothing in the operand's own dtype.
    if (isFloat(n.type.dtype)) {
      const passes = PASS_THROUGH.has(n.op), narrowed = opts.narrowed?.has(n.id) ?? false;
      for (let i = 0; i < size; i++) {
        prop[i] += SAFETY * ownError(n.type.dtype, r[i], prop[i], narrowed, passes);
      }
    }
    bounds[n.id] = prop;
    let lowest = Infinity;
    for (let i = 0; i < size; i++) lowest = Math.min(lowest, r[i] - prop[i]);
    const f = structuralFloor(g, n, floors, vals);
    floors[n.id] = Math.max(Number.isNaN(f) ? -Infinity : f, Number.isNaN(lowest) ? -Infinity : lowest);
  }
  return bounds;
}
