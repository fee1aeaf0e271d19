/** Element types of the IR. Names are used verbatim in dumps and error messages. */
export const DTYPES = {
  f32: { bytes: 4, kind: "float" },
  f16: { bytes: 2, kind: "float" },
  bf16: { bytes: 2, kind: "float" },
  i32: { bytes: 4, kind: "int" },
  u32: { bytes: 4, kind: "int" },
  bool: { bytes: 1, kind: "bool" },
} as const;

export type DType = keyof typeof DTYPES;

export function isDType(s: string): s is DType {
  return Object.hasOwn(DTYPES, s);
}

export function isFloat(d: DType): boolean {
  return DTYPES[d].kind === "float";
}

export function isInt(d: DType): boolean {
  return DTYPES[d].kind === "int";
}

export function byteSize(d: DType): number {
  return DTYPES[d].bytes;
}

/** A static tensor type: every dimension is known when the graph is built. */
export interface TensorType {
  readonly shape: readonly number[];
  readonly dtype: DType;
}

export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

export function typeToString(t: TensorType): string {
  return `${t.dtype}[${t.shape.join(",")}]`;
}

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

export function sameType(a: TensorType, b: TensorType): boolean {
  return a.dtype === b.dtype && sameShape(a.shape, b.shape);
}

/** Row-major strides of a shape, in elements. */
export function stridesOf(shape: readonly number[]): number[] {
  const s = new Array<number>(shape.length);
  let acc = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}
