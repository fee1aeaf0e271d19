/**
 * The op sets of the kernel IR, as data: one row per op. Every table that handles the ops — the emitters,
 * the printer, the constant folder, the index analysis, the cost model — is a `Record<KUnOp, ...>` or a
 * `Record<KBinOp, ...>`, so a new row here is a type error wherever it is not handled yet.
 */

/** Which values an op accepts (per lane): floats, numbers (not bool), integers, bool and integers, any. */
export type KOperands = "float" | "number" | "integer" | "logical" | "any";

/** The unary ops, with the values each accepts. */
export const K_UNARY = {
  neg: { operands: "number", doc: "-x (wraps on u32)" },
  abs: { operands: "number", doc: "|x| (u32 unchanged)" },
  exp: { operands: "float", doc: "e^x" },
  log: { operands: "float", doc: "natural logarithm" },
  tanh: { operands: "float", doc: "hyperbolic tangent" },
  erf: { operands: "float", doc: "the error function" },
  sqrt: { operands: "float", doc: "square root" },
  rsqrt: { operands: "float", doc: "1 / sqrt(x)" },
  reciprocal: { operands: "float", doc: "1 / x" },
  not: { operands: "logical", doc: "logical not on bool, bitwise not on integers" },
} as const satisfies Record<string, { readonly operands: KOperands; readonly doc: string }>;
export type KUnOp = keyof typeof K_UNARY;

/** The binary ops: `compare` ops yield bool (v4bool on vectors), the others their operands' type. */
export const K_BINARY = {
  add: { operands: "number", compare: false, doc: "a + b" },
  sub: { operands: "number", compare: false, doc: "a - b" },
  mul: { operands: "number", compare: false, doc: "a * b" },
  div: { operands: "number", compare: false, doc: "float division, truncating on integers" },
  mod: { operands: "integer", compare: false, doc: "integer remainder (i32/u32 only)" },
  max: { operands: "number", compare: false, doc: "the larger of a and b" },
  min: { operands: "number", compare: false, doc: "the smaller of a and b" },
  and: { operands: "logical", compare: false, doc: "logical on bool, bitwise on integers" },
  or: { operands: "logical", compare: false, doc: "logical on bool, bitwise on integers" },
  eq: { operands: "any", compare: true, doc: "a == b" },
  ne: { operands: "any", compare: true, doc: "a != b" },
  lt: { operands: "any", compare: true, doc: "a < b" },
  le: { operands: "any", compare: true, doc: "a <= b" },
  gt: { operands: "any", compare: true, doc: "a > b" },
  ge: { operands: "any", compare: true, doc: "a >= b" },
} as const satisfies Record<
  string,
  { readonly operands: KOperands; readonly compare: boolean; readonly doc: string }
>;
export type KBinOp = keyof typeof K_BINARY;

/** Whether a value of lane type `t` is one `operands` accepts. */
export function accepts(operands: KOperands, t: string): boolean {
  const float = t === "f32" || t === "f16" || t === "bf16";
  switch (operands) {
    case "float":
      return float;
    case "number":
      return t !== "bool";
    case "integer":
      return !float && t !== "bool";
    case "logical":
      return !float;
    case "any":
      return true;
  }
}
