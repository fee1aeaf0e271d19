/**
 * One CPU implementation per primitive op, written as plainly as possible: this is the numeric oracle
 * that every generated kernel is compared with. Values of every dtype travel as Float64Array holding the
 * exact numbers (integers and 0/1 for bool); rounding to the node's dtype happens in interpreter.ts.
 * Reductions and matmul accumulate in f64.
 */
import { type DType, isInt, type Node, numel, type OpName, stridesOf, type TensorType } from "../ir/mod.ts";
import { attentionReference } from "./reference_attention.ts";
import { erf } from "./erf.ts";
import { fillUniform } from "./philox.ts";

export type Buf = Float64Array;
export interface OpCtx {
  node: Node;
  ins: Buf[];
  inTypes: TensorType[];
}
type Impl = (c: OpCtx) => Buf;

const map1 = (f: (x: number) => number): Impl => ({ ins: [a] }) => {
  const out = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = f(a[i]);
  return out;
};
const map2 = (f: (x: number, y: number) => number): Impl => ({ ins: [a, b] }) => {
  const out = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = f(a[i], b[i]);
  return out;
};

/** Converts a value to dtype `to` the way a C cast does (floats to ints truncate, then wrap). */
export function castValue(x: number, to: DType): number {
  switch (to) {
    case "bool":
      return x !== 0 ? 1 : 0;
    case "i32":
      return Number.isFinite(x) ? Math.trunc(x) | 0 : 0;
    case "u32":
      return Number.isFinite(x) ? Math.trunc(x) >>> 0 : 0;
    default:
      return x;
  }
}

function reduceImpl(init: number, combine: (acc: number, x: number) => number): Impl {
  return ({ node, ins: [x], inTypes: [t] }) => {
    const axes = node.attrs.axes as number[];
    const outShape = node.type.shape;
    const out = new Float64Array(numel(outShape)).fill(init);
    // Output stride of each input axis; 0 on reduced axes so they all land on the same element.
    const os = stridesOf(outShape).map((s, d) => (axes.includes(d) ? 0 : s));
    const rank = t.shape.length;
    const idx = new Array<number>(rank).fill(0);
    for (let i = 0; i < x.length; i++) {
      let o = 0;
      for (let d = 0; d < rank; d++) o += idx[d] * os[d];
      out[o] = combine(out[o], x[i]);
      for (let d = rank - 1; d >= 0; d--) {
        if (++idx[d] < t.shape[d]) break;
        idx[d] = 0;
      }
    }
    return out;
  };
}

/** For each output element, the linear index of the input element it copies (movement ops). */
function gatherByIndex(x: Buf, outShape: readonly number[], srcIndex: (idx: number[]) => number): Buf {
  const n = numel(outShape);
  const out = new Float64Array(n);
  const rank = outShape.length;
  const idx = new Array<number>(rank).fill(0);
  for (let i = 0; i < n; i++) {
    const s = srcIndex(idx);
    out[i] = s < 0 ? 0 : x[s];
    for (let d = rank - 1; d >= 0; d--) {
      if (++idx[d] < outShape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

function matmul({ node, ins: [a, b], inTypes: [ta] }: OpCtx): Buf {
  const r = ta.shape.length;
  const transA = node.attrs.transpose_a as boolean, transB = node.attrs.transpose_b as boolean;
  const [m, n] = node.type.shape.slice(r - 2);
  const k = transA ? ta.shape[r - 2] : ta.shape[r - 1];
  const batch = numel(ta.shape.slice(0, r - 2));
  const out = new Float64Array(batch * m * n);
  const aRow = new Float64Array(k);
  const acc = new Float64Array(n);
  for (let bi = 0; bi < batch; bi++) {
    const aOff = bi * m * k, bOff = bi * k * n, oOff = bi * m * n;
    for (let i = 0; i < m; i++) {
      for (let p = 0; p < k; p++) aRow[p] = transA ? a[aOff + p * m + i] : a[aOff + i * k + p];
      acc.fill(0);
      for (let p = 0; p < k; p++) {
        const av = aRow[p];
        if (transB) { for (let j = 0; j < n; j++) acc[j] += av * b[bOff + j * k + p]; }
        else {
          const row = bOff + p * n;
          for (let j = 0; j < n; j++) acc[j] += av * b[row + j];
        }
      }
      out.set(acc, oOff + i * n);
    }
  }
  return out;
}

function checkIndex(node: Node, v: number, rows: number): number {
  if (!(v >= 0 && v < rows)) {
    throw new RangeError(`${node.op} %${node.id}: index ${v} is outside [0, ${rows})`);
  }
  return v;
}

const IMPLS: { [K in OpName]: Impl } = {
  input: () => {
    throw new Error("sources are fed, not computed");
  },
  param: () => {
    throw new Error("sources are fed, not computed");
  },
  const: ({ node }) => new Float64Array(numel(node.type.shape)).fill(node.attrs.value as number),
  iota: ({ node }) => {
    const axis = node.attrs.axis as number;
    const stride = stridesOf(node.type.shape)[axis], size = node.type.shape[axis];
    const out = new Float64Array(numel(node.type.shape));
    for (let i = 0; i < out.length; i++) out[i] = Math.floor(i / stride) % size;
    return out;
  },
  neg: map1((x) => -x),
  abs: map1(Math.abs),
  exp: map1(Math.exp),
  log: map1(Math.log),
  tanh: map1(Math.tanh),
  erf: map1(erf),
  sqrt: map1(Math.sqrt),
  rsqrt: map1((x) => 1 / Math.sqrt(x)),
  reciprocal: map1((x) => 1 / x),
  stop_gradient: ({ ins: [x] }) => x,
  not: map1((x) => (x ? 0 : 1)),
  // The conversion itself is the rounding to the node's dtype that interpreter.ts applies to every result.
  cast: ({ ins: [x] }) => x,
  add: map2((a, b) => a + b),
  sub: map2((a, b) => a - b),
  mul: map2((a, b) => a * b),
  div: (c) => {
    const int = isInt(c.node.type.dtype);
    return map2(int ? (a, b) => Math.trunc(a / b) : (a, b) => a / b)(c);
  },
  // NaN propagates through max/min, as IEEE maximum (and a GPU's NaN-propagating max) does.
  max: map2((a, b) => (a !== a || b !== b ? NaN : a >= b ? a : b)),
  min: map2((a, b) => (a !== a || b !== b ? NaN : a <= b ? a : b)),
  and: map2((a, b) => (a && b ? 1 : 0)),
  or: map2((a, b) => (a || b ? 1 : 0)),
  eq: map2((a, b) => (a === b ? 1 : 0)),
  ne: map2((a, b) => (a !== b ? 1 : 0)),
  lt: map2((a, b) => (a < b ? 1 : 0)),
  le: map2((a, b) => (a <= b ? 1 : 0)),
  gt: map2((a, b) => (a > b ? 1 : 0)),
  ge: map2((a, b) => (a >= b ? 1 : 0)),
  where: ({ ins: [c, a, b] }) => {
    const out = new Float64Array(a.length);
    for (let i = 0; i < a.length; i++) out[i] = c[i] ? a[i] : b[i];
    return out;
  },
  reduce_sum: reduceImpl(0, (acc, x) => acc + x),
  reduce_max: reduceImpl(-Infinity, (acc, x) => (acc !== acc || x !== x ? NaN : x > acc ? x : acc)),
  reshape: ({ ins: [x] }) => x,
  broadcast: ({ node, ins: [x], inTypes: [t] }) => {
    const outShape = node.type.shape, off = outShape.length - t.shape.length;
    const st = stridesOf(t.shape);
    return gatherByIndex(x, outShape, (idx) => {
      let s = 0;
      for (let d = 0; d < t.shape.length; d++) if (t.shape[d] !== 1) s += idx[off + d] * st[d];
      return s;
    });
  },
  permute: ({ node, ins: [x], inTypes: [t] }) => {
    const perm = node.attrs.perm as number[];
    const st = stridesOf(t.shape);
    return gatherByIndex(x, node.type.shape, (idx) => {
      let s = 0;
      for (let d = 0; d < perm.length; d++) s += idx[d] * st[perm[d]];
      return s;
    });
  },
  slice: ({ node, ins: [x], inTypes: [t] }) => {
    const start = node.attrs.start as number[];
    const st = stridesOf(t.shape);
    return gatherByIndex(x, node.type.shape, (idx) => {
      let s = 0;
      for (let d = 0; d < idx.length; d++) s += (idx[d] + start[d]) * st[d];
      return s;
    });
  },
  pad: ({ node, ins: [x], inTypes: [t] }) => {
    const low = node.attrs.low as number[];
    const st = stridesOf(t.shape);
    return gatherByIndex(x, node.type.shape, (idx) => {
      let s = 0;
      for (let d = 0; d < idx.length; d++) {
        const j = idx[d] - low[d];
        if (j < 0 || j >= t.shape[d]) return -1;
        s += j * st[d];
      }
      return s;
    });
  },
  concat: ({ node, ins, inTypes }) => {
    const axis = node.attrs.axis as number;
    const outShape = node.type.shape;
    const out = new Float64Array(numel(outShape));
    const outer = numel(outShape.slice(0, axis)), inner = numel(outShape.slice(axis + 1));
    let col = 0;
    ins.forEach((x, p) => {
      const w = inTypes[p].shape[axis] * inner;
      for (let o = 0; o < outer; o++) {
        out.set(x.subarray(o * w, (o + 1) * w), o * outShape[axis] * inner + col);
      }
      col += w;
    });
    return out;
  },
  matmul,
  gather: ({ node, ins: [table, idx], inTypes: [tt] }) => {
    const rows = tt.shape[0], row = numel(tt.shape.slice(1));
    const out = new Float64Array(idx.length * row);
    for (let i = 0; i < idx.length; i++) {
      const r = checkIndex(node, idx[i], rows);
      out.set(table.subarray(r * row, (r + 1) * row), i * row);
    }
    return out;
  },
  scatter_add: ({ node, ins: [idx, upd] }) => {
    const rows = node.attrs.rows as number, row = numel(node.type.shape.slice(1));
    const out = new Float64Array(rows * row);
    for (let i = 0; i < idx.length; i++) {
      const r = checkIndex(node, idx[i], rows);
      for (let j = 0; j < row; j++) out[r * row + j] += upd[i * row + j];
    }
    return out;
  },
  random_uniform: ({ node, ins: [key] }) => {
    const out = new Float64Array(numel(node.type.shape));
    fillUniform(out, key[0], key[1], node.attrs.stream as number);
    return out;
  },
  attention: ({ node, ins, inTypes }) => attentionReference(node, ins, inTypes),
  attention_grad: ({ node, ins, inTypes }) => attentionReference(node, ins, inTypes),
};

export function runOp(op: OpName, c: OpCtx): Buf {
  return IMPLS[op](c);
}
