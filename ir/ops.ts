/**
 * The primitive op table, as data. One row per op; the row's key is the op's name, used verbatim in IR dumps,
 * error messages and the VJP table. Passes derive their groupings from `category` (see the predicates at the
 * end) instead of keeping switch lists of their own. Every op has a static result type computed by `infer`
 * from its operand types and attributes. Source ops (`input`, `param`, `const`, `iota`) and `random_uniform`
 * take their result type from the node's declared type, which `infer` only validates.
 */
import { type DType, isDType, isFloat, isInt, numel, type TensorType, typeToString } from "./dtype.ts";
import { sameShape, sameType } from "./dtype.ts";
import { IRError } from "./errors.ts";

export type AttrKind = "int" | "ints" | "number" | "bool" | "string" | "dtype";
export type AttrValue = number | number[] | boolean | string;
export type Attrs = Readonly<Record<string, AttrValue>>;

export type OpCategory =
  | "source"
  | "unary"
  | "binary"
  | "compare"
  | "select"
  | "reduce"
  | "movement"
  | "matmul"
  | "gather"
  | "scatter"
  | "random"
  | "composite";

export interface OpDef<C extends OpCategory = OpCategory> {
  readonly category: C;
  /** Number of operands; -1 means one or more (concat). */
  readonly arity: number;
  /** Required attributes and their kinds. Optional ones are listed in `optional`. */
  readonly attrs: Readonly<Record<string, AttrKind>>;
  readonly optional?: Readonly<Record<string, AttrKind>>;
  readonly doc: string;
  // deno-lint-ignore no-explicit-any
  readonly infer: (ins: TensorType[], attrs: any, declared: TensorType | undefined) => TensorType;
}

const fail = (msg: string): never => {
  throw new IRError(msg);
};

function need(cond: boolean, msg: () => string): void {
  if (!cond) fail(msg());
}

function declaredType(declared: TensorType | undefined): TensorType {
  return declared ?? fail("a declared result type is required");
}

function checkShape(shape: readonly number[], what: string): void {
  need(
    shape.every((d) => Number.isInteger(d) && d >= 0),
    () => `${what} must be non-negative integers, got [${shape.join(",")}]`,
  );
}

/** An elementwise op of `arity` equal operands whose dtype passes `ok`; the result is the first's type. */
function elementwise<C extends "unary" | "binary">(
  category: C,
  doc: string,
  ok: (d: DType) => boolean,
  what: string,
): OpDef<C> {
  return {
    category,
    arity: category === "unary" ? 1 : 2,
    attrs: {},
    doc,
    infer: ([a, b]) => {
      if (b) sameOperands(a, b);
      need(ok(a.dtype), () => `needs ${what} operand${b ? "s" : ""}, got ${typeToString(a)}`);
      return a;
    },
  };
}
const unaryFloat = (doc: string) => elementwise("unary", doc, isFloat, "a float");
const unaryNumeric = (doc: string) => elementwise("unary", doc, (d) => d !== "bool", "a numeric");
const binaryNumeric = (doc: string) => elementwise("binary", doc, (d) => d !== "bool", "numeric");
const binaryLogical = (doc: string) => elementwise("binary", doc, (d) => d === "bool", "bool");

function sameOperands(a: TensorType, b: TensorType): void {
  need(
    sameType(a, b),
    () =>
      `operands must have the same shape and dtype (broadcast explicitly), got ${typeToString(a)} and ${
        typeToString(b)
      }`,
  );
}

function compare(doc: string): OpDef<"compare"> {
  return {
    category: "compare",
    arity: 2,
    attrs: {},
    doc,
    infer: ([a, b]) => {
      sameOperands(a, b);
      return { shape: a.shape, dtype: "bool" };
    },
  };
}

function reduce(doc: string): OpDef<"reduce"> {
  return {
    category: "reduce",
    arity: 1,
    attrs: { axes: "ints" },
    doc,
    infer: ([x], { axes }: { axes: number[] }) => {
      need(x.dtype !== "bool", () => `needs a numeric operand, got ${typeToString(x)}`);
      need(axes.length > 0, () => "axes must not be empty");
      need(
        axes.every((a, i) =>
          Number.isInteger(a) && a >= 0 && a < x.shape.length && (i === 0 || a > axes[i - 1])
        ),
        () => `axes [${axes.join(",")}] must be increasing and within rank ${x.shape.length}`,
      );
      // Reduced axes are kept with size 1, so results broadcast back against their operand.
      return { shape: x.shape.map((d, i) => (axes.includes(i) ? 1 : d)), dtype: x.dtype };
    },
  };
}

/**
 * Self-attention's operands: q [..., Sq, d], k [..., Sk, d], v [..., Sk, dv] of one float dtype, an additive
 * mask broadcasting to the scores [..., Sq, Sk], `extra` more of the result's type (attention_grad's dO), and
 * the dropout key u32[2] last when dropout > 0. Returns the result type [..., Sq, dv].
 */
function attentionOperands(ins: TensorType[], dropout: number, stream: unknown, extra: number): TensorType {
  const [q, k, v, mask] = ins, r = q.shape.length, lead = q.shape.slice(0, -2);
  const sameLead = (t: TensorType) =>
    t.dtype === q.dtype && t.shape.length === r && sameShape(lead, t.shape.slice(0, -2));
  need(
    dropout >= 0 && dropout < 1 && ins.length === 4 + extra + (dropout > 0 ? 1 : 0),
    () =>
      `needs q, k, v, mask${extra ? ", dO" : ""}${
        dropout > 0 ? ", key" : ""
      }: got ${ins.length} operands, dropout ${dropout}`,
  );
  need(
    isFloat(q.dtype) && r >= 2 && sameLead(k) && sameLead(v) && k.shape[r - 1] === q.shape[r - 1] &&
      v.shape[r - 2] === k.shape[r - 2],
    () =>
      `q, k, v must be [..., Sq, d], [..., Sk, d], [..., Sk, dv]: got ${ins.slice(0, 3).map(typeToString)}`,
  );
  const scores = [...lead, q.shape[r - 2], k.shape[r - 2]], off = r - mask.shape.length;
  need(
    mask.dtype === q.dtype && off >= 0 && mask.shape.every((d, i) => d === 1 || d === scores[i + off]),
    () => `mask ${typeToString(mask)} does not broadcast to the scores [${scores.join(",")}]`,
  );
  const out = { shape: [...lead, q.shape[r - 2], v.shape[r - 1]], dtype: q.dtype };
  need(ins.slice(4, 4 + extra).every((t) => sameType(t, out)), () => `dO must be ${typeToString(out)}`);
  const key = { shape: [2], dtype: "u32" as const };
  need(
    dropout === 0 || (sameType(ins[ins.length - 1], key) && Number.isInteger(stream)),
    () => "bad dropout key",
  );
  return out;
}

type AttentionAttrs = { dropout: number; stream?: number };

export const OPS = {
  // ---- sources -------------------------------------------------------------------------------
  input: {
    category: "source",
    arity: 0,
    attrs: { name: "string" },
    doc: "a value supplied at run time (token ids, masks, labels, the RNG key)",
    infer: (_ins, _a, declared) => declaredType(declared),
  },
  param: {
    category: "source",
    arity: 0,
    attrs: { name: "string", init: "string" },
    doc: "a trainable parameter; init is 'zeros', 'ones' or 'trunc_normal(std)'",
    infer: (_ins, { init }: { init: string }, declared) => {
      need(/^(zeros|ones|trunc_normal\([0-9.eE+-]+\))$/.test(init), () => `unknown init '${init}'`);
      const t = declaredType(declared);
      need(isFloat(t.dtype), () => `parameters must be float, got ${t.dtype}`);
      return t;
    },
  },
  const: {
    category: "source",
    arity: 0,
    attrs: { value: "number" },
    doc: "a tensor with every element equal to value",
    infer: (_ins, _a, declared) => declaredType(declared),
  },
  iota: {
    category: "source",
    arity: 0,
    attrs: { axis: "int" },
    doc: "each element is its index along axis (integer dtype)",
    infer: (_ins, { axis }: { axis: number }, declared) => {
      const t = declaredType(declared);
      need(isInt(t.dtype), () => `iota must be i32 or u32, got ${t.dtype}`);
      need(axis >= 0 && axis < t.shape.length, () => `axis ${axis} out of range for rank ${t.shape.length}`);
      return t;
    },
  },

  // ---- elementwise unary ---------------------------------------------------------------------
  neg: unaryNumeric("-x"),
  abs: unaryNumeric("|x|"),
  exp: unaryFloat("e^x"),
  log: unaryFloat("natural logarithm"),
  tanh: unaryFloat("hyperbolic tangent"),
  erf: unaryFloat("the error function"),
  sqrt: unaryFloat("square root"),
  rsqrt: unaryFloat("1/sqrt(x)"),
  reciprocal: unaryFloat("1/x"),
  stop_gradient: {
    category: "unary",
    arity: 1,
    attrs: {},
    doc: "identity whose derivative is taken as zero (the max subtracted inside softmax and log-sum-exp)",
    infer: ([x]) => x,
  },
  not: {
    category: "unary",
    arity: 1,
    attrs: {},
    doc: "logical negation",
    infer: ([x]) => {
      need(x.dtype === "bool", () => `needs a bool operand, got ${typeToString(x)}`);
      return x;
    },
  },
  cast: {
    category: "unary",
    arity: 1,
    attrs: { to: "dtype" },
    doc: "convert to dtype `to` (floats to ints truncate toward zero; bool is 0/1)",
    infer: ([x], { to }: { to: DType }) => ({ shape: x.shape, dtype: to }),
  },

  // ---- elementwise binary --------------------------------------------------------------------
  add: binaryNumeric("a + b"),
  sub: binaryNumeric("a - b"),
  mul: binaryNumeric("a * b"),
  div: binaryNumeric("a / b"),
  max: binaryNumeric("larger of a and b"),
  min: binaryNumeric("smaller of a and b"),
  and: binaryLogical("logical and"),
  or: binaryLogical("logical or"),
  eq: compare("a == b"),
  ne: compare("a != b"),
  lt: compare("a < b"),
  le: compare("a <= b"),
  gt: compare("a > b"),
  ge: compare("a >= b"),
  where: {
    category: "select",
    arity: 3,
    attrs: {},
    doc: "cond ? a : b, elementwise",
    infer: ([c, a, b]) => {
      sameOperands(a, b);
      need(
        c.dtype === "bool" && c.shape.length === a.shape.length && c.shape.every((d, i) => d === a.shape[i]),
        () => `condition must be bool of the operands' shape, got ${typeToString(c)} for ${typeToString(a)}`,
      );
      return a;
    },
  },

  // ---- reductions ----------------------------------------------------------------------------
  reduce_sum: reduce("sum over axes (kept with size 1)"),
  reduce_max: reduce("maximum over axes (kept with size 1)"),

  // ---- movement ------------------------------------------------------------------------------
  reshape: {
    category: "movement",
    arity: 1,
    attrs: { shape: "ints" },
    doc: "same elements in row-major order, new shape",
    infer: ([x], { shape }: { shape: number[] }) => {
      checkShape(shape, "shape");
      need(
        numel(shape) === numel(x.shape),
        () => `cannot reshape ${typeToString(x)} to [${shape.join(",")}]`,
      );
      return { shape, dtype: x.dtype };
    },
  },
  broadcast: {
    category: "movement",
    arity: 1,
    attrs: { shape: "ints" },
    doc: "numpy broadcast: dims aligned right; size-1 or missing dims expand",
    infer: ([x], { shape }: { shape: number[] }) => {
      checkShape(shape, "shape");
      const off = shape.length - x.shape.length;
      need(
        off >= 0 && x.shape.every((d, i) => d === shape[off + i] || d === 1),
        () => `cannot broadcast ${typeToString(x)} to [${shape.join(",")}]`,
      );
      return { shape, dtype: x.dtype };
    },
  },
  permute: {
    category: "movement",
    arity: 1,
    attrs: { perm: "ints" },
    doc: "out.shape[i] = x.shape[perm[i]]",
    infer: ([x], { perm }: { perm: number[] }) => {
      need(
        perm.length === x.shape.length && [...perm].sort((a, b) => a - b).every((p, i) => p === i),
        () => `perm [${perm.join(",")}] is not a permutation of rank ${x.shape.length}`,
      );
      return { shape: perm.map((p) => x.shape[p]), dtype: x.dtype };
    },
  },
  slice: {
    category: "movement",
    arity: 1,
    attrs: { start: "ints", end: "ints" },
    doc: "x[start:end] on every axis (unit stride)",
    infer: ([x], { start, end }: { start: number[]; end: number[] }) => {
      need(
        start.length === x.shape.length && end.length === x.shape.length &&
          start.every((s, i) => Number.isInteger(s) && s >= 0 && s <= end[i] && end[i] <= x.shape[i]),
        () => `slice [${start.join(",")}]..[${end.join(",")}] is out of range for ${typeToString(x)}`,
      );
      return { shape: start.map((s, i) => end[i] - s), dtype: x.dtype };
    },
  },
  pad: {
    category: "movement",
    arity: 1,
    attrs: { low: "ints", high: "ints" },
    doc: "zero padding: low[i] zeros before and high[i] after axis i (the adjoint of slice)",
    infer: ([x], { low, high }: { low: number[]; high: number[] }) => {
      need(
        low.length === x.shape.length && high.length === x.shape.length &&
          [...low, ...high].every((p) => Number.isInteger(p) && p >= 0),
        () => `pad low [${low.join(",")}] high [${high.join(",")}] does not fit ${typeToString(x)}`,
      );
      return { shape: x.shape.map((d, i) => low[i] + d + high[i]), dtype: x.dtype };
    },
  },
  concat: {
    category: "movement",
    arity: -1,
    attrs: { axis: "int" },
    doc: "join operands along axis",
    infer: (ins, { axis }: { axis: number }) => {
      const [first] = ins;
      need(
        axis >= 0 && axis < first.shape.length,
        () => `axis ${axis} out of range for ${typeToString(first)}`,
      );
      let total = 0;
      for (const t of ins) {
        need(
          t.dtype === first.dtype && t.shape.length === first.shape.length &&
            t.shape.every((d, i) => i === axis || d === first.shape[i]),
          () => `cannot concat ${typeToString(t)} with ${typeToString(first)} on axis ${axis}`,
        );
        total += t.shape[axis];
      }
      return { shape: first.shape.map((d, i) => (i === axis ? total : d)), dtype: first.dtype };
    },
  },

  // ---- library-class ops ---------------------------------------------------------------------
  matmul: {
    category: "matmul",
    arity: 2,
    attrs: { transpose_a: "bool", transpose_b: "bool" },
    doc: "batched op(a) @ op(b) over the last two axes; leading (batch) axes must match",
    infer: ([a, b], { transpose_a: ta, transpose_b: tb }: { transpose_a: boolean; transpose_b: boolean }) => {
      need(
        isFloat(a.dtype) && a.dtype === b.dtype && a.shape.length >= 2 && a.shape.length === b.shape.length,
        () =>
          `needs float operands of equal rank >= 2 and dtype, got ${typeToString(a)} and ${typeToString(b)}`,
      );
      const r = a.shape.length;
      need(
        a.shape.slice(0, r - 2).every((d, i) => d === b.shape[i]),
        () => `batch dims differ: ${typeToString(a)} and ${typeToString(b)}`,
      );
      const [m, ka] = ta ? [a.shape[r - 1], a.shape[r - 2]] : [a.shape[r - 2], a.shape[r - 1]];
      const [kb, n] = tb ? [b.shape[r - 1], b.shape[r - 2]] : [b.shape[r - 2], b.shape[r - 1]];
      need(
        ka === kb,
        () =>
          `inner dims differ: ${typeToString(a)}${ta ? "ᵀ" : ""} @ ${typeToString(b)}${
            tb ? "ᵀ" : ""
          } (${ka} vs ${kb})`,
      );
      return { shape: [...a.shape.slice(0, r - 2), m, n], dtype: a.dtype };
    },
  },
  gather: {
    category: "gather",
    arity: 2,
    attrs: {},
    doc: "rows of table [V, ...rest] picked by integer indices [...I]; result [...I, ...rest]",
    infer: ([table, idx]) => {
      need(table.shape.length >= 1, () => `table must have rank >= 1, got ${typeToString(table)}`);
      need(isInt(idx.dtype), () => `indices must be i32 or u32, got ${typeToString(idx)}`);
      return { shape: [...idx.shape, ...table.shape.slice(1)], dtype: table.dtype };
    },
  },
  scatter_add: {
    category: "scatter",
    arity: 2,
    attrs: { rows: "int" },
    doc: "the adjoint of gather: zeros [rows, ...rest] with updates [...I, ...rest] added at indices [...I]",
    infer: ([idx, upd], { rows }: { rows: number }) => {
      need(isInt(idx.dtype), () => `indices must be i32 or u32, got ${typeToString(idx)}`);
      need(
        upd.shape.length >= idx.shape.length && idx.shape.every((d, i) => d === upd.shape[i]),
        () => `updates ${typeToString(upd)} must start with the indices' shape [${idx.shape.join(",")}]`,
      );
      need(Number.isInteger(rows) && rows >= 0, () => `rows must be a non-negative integer, got ${rows}`);
      return { shape: [rows, ...upd.shape.slice(idx.shape.length)], dtype: upd.dtype };
    },
  },
  random_uniform: {
    category: "random",
    arity: 1,
    attrs: { stream: "int" },
    doc:
      "uniform [0,1) from Philox4x32-10 keyed by (key[0] = seed, stream), counter by (index, key[1] = step)",
    infer: ([key], _a, declared) => {
      need(
        key.dtype === "u32" && key.shape.length === 1 && key.shape[0] === 2,
        () => `key must be u32[2] (seed, step), got ${typeToString(key)}`,
      );
      const t = declaredType(declared);
      need(t.dtype === "f32", () => `result must be f32, got ${t.dtype}`);
      return t;
    },
  },
  // ---- composites: one op for the graph, decomposed into primitives where a target has no kernel for it
  attention: {
    category: "composite",
    arity: -1,
    attrs: { scale: "number", dropout: "number" },
    optional: { stream: "int", low: "dtype" },
    doc:
      "dropout(softmax(q·kᵀ·scale + mask))·v; operands q, k, v, mask[, key] (compiler/passes/decompose.ts)",
    infer: (ins, { dropout, stream }: AttentionAttrs) => attentionOperands(ins, dropout, stream, 0),
  },
  attention_grad: {
    category: "composite",
    arity: -1,
    attrs: { scale: "number", dropout: "number", wrt: "int", wanted: "ints" },
    optional: { stream: "int", low: "dtype" },
    doc:
      "attention's cotangent for operand `wrt` (0 q, 1 k, 2 v) given dO; operands q, k, v, mask, dO[, key]",
    infer: (ins, { dropout, stream, wrt, wanted }: AttentionAttrs & { wrt: number; wanted: number[] }) => {
      attentionOperands(ins, dropout, stream, 1);
      need(
        wanted.includes(wrt) && wanted.every((w) => w >= 0 && w <= 2),
        () => `wrt ${wrt} not in [${wanted}]`,
      );
      return ins[wrt];
    },
  },
} satisfies Record<string, OpDef>;

export type OpName = keyof typeof OPS;
/**
 * The ops of one category, as a type: tables over a category (the lowering's map of elementwise ops to
 * kernel-IR ops) are keyed by it, so a new op of that category is a type error until it has a row.
 */
export type OpNameOf<C extends OpCategory> = {
  [K in OpName]: (typeof OPS)[K]["category"] extends C ? K : never;
}[OpName];

export function isOpName(s: string): s is OpName {
  return Object.hasOwn(OPS, s);
}

// ---- group predicates, derived from the table ---------------------------------------------------
const categoryOf = (op: OpName): OpCategory => OPS[op].category;

export const isSource = (op: OpName) => categoryOf(op) === "source";
/** Pointwise ops: each output element depends only on the same element of each operand. */
export const isElementwise = (op: OpName) =>
  ["unary", "binary", "compare", "select"].includes(categoryOf(op));
export const isReduce = (op: OpName) => categoryOf(op) === "reduce";
export const isMovement = (op: OpName) => categoryOf(op) === "movement";
/** Ops best served by a library or a dedicated template (GEMMs). */
export const isLibrary = (op: OpName) => categoryOf(op) === "matmul";
/** Ops that stand for a composition of primitives (attention); a target implements or decomposes them. */
export const isComposite = (op: OpName) => categoryOf(op) === "composite";

export const OP_NAMES = Object.keys(OPS) as OpName[];

/** Validates attribute presence and kinds against the table row; returns a message or undefined. */
export function checkAttrs(op: OpName, attrs: Attrs): string | undefined {
  const def: OpDef = OPS[op];
  const all: Record<string, AttrKind> = { ...def.attrs, ...def.optional };
  for (const k of Object.keys(def.attrs)) {
    if (!(k in attrs)) return `missing attribute '${k}'`;
  }
  for (const [k, v] of Object.entries(attrs)) {
    const kind = all[k];
    if (!kind) return `unknown attribute '${k}'`;
    if (!attrMatches(kind, v)) return `attribute '${k}' must be ${kind}, got ${JSON.stringify(v)}`;
  }
  return undefined;
}

function attrMatches(kind: AttrKind, v: AttrValue): boolean {
  switch (kind) {
    case "int":
      return typeof v === "number" && Number.isInteger(v);
    case "ints":
      return Array.isArray(v) && v.every((x) => Number.isInteger(x));
    case "number":
      return typeof v === "number";
    case "bool":
      return typeof v === "boolean";
    case "string":
      return typeof v === "string";
    case "dtype":
      return typeof v === "string" && isDType(v);
  }
}
