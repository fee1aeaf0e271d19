/**
 * Strided views of a stored value (element (i0, i1, …) at offset + Σ i_d·strides[d]) through reshapes:
 * how a library call or a flash kernel reads a value through the views between it and its buffer.
 */
/** A strided view of a buffer: element (i0, i1, …) is at offset + Σ i_d·strides[d]. */
export interface View {
  readonly shape: readonly number[];
  readonly strides: readonly number[];
  readonly offset: number;
}

export const contiguousView = (shape: readonly number[]): View => {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    strides[d] = s;
    s *= shape[d];
  }
  return { shape, strides, offset: 0 };
};

/**
 * The view `reshape` makes of `v` (row-major linear order kept), or undefined when it is not a strided
 * view: each group of input axes that maps onto a group of output axes must be contiguous within itself.
 */
export function reshapeView(v: View, outShape: readonly number[]): View | undefined {
  const ins = v.shape.map((s, i) => [s, v.strides[i]] as const).filter(([s]) => s !== 1);
  const strides = new Array<number>(outShape.length);
  let i = 0, d = 0;
  while (d < outShape.length) {
    if (outShape[d] === 1) {
      strides[d] = 0;
      d++;
      continue;
    }
    if (i >= ins.length) return undefined;
    let j = i, e = d, pi = ins[i][0], pe = outShape[d];
    while (pi !== pe) {
      if (pi < pe) {
        if (++j >= ins.length) return undefined;
        pi *= ins[j][0];
      } else {
        if (++e >= outShape.length) return undefined;
        pe *= outShape[e];
      }
    }
    for (let t = i; t < j; t++) if (ins[t][1] !== ins[t + 1][1] * ins[t + 1][0]) return undefined;
    let st = ins[j][1];
    for (let t = e; t >= d; t--) {
      strides[t] = st;
      st *= outShape[t];
    }
    i = j + 1;
    d = e + 1;
  }
  return { shape: outShape, strides, offset: v.offset };
}
