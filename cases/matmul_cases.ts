/**
 * Matmul problems for the WGSL matmul template: a case builder that wraps one template kernel in a
 * one-kernel Plan, shared by the template's benchmark (bench/matmul_template.ts) and its tests.
 */
import { emitWGSL } from "../compiler/codegen/wgsl.ts";
import {
  add,
  cast,
  f32,
  i32,
  type KBinding,
  type Kernel,
  type KExpr,
  type KStorage,
  let_,
  load,
  mul,
  ref,
  store,
  un,
} from "../compiler/kernel_ir/ir.ts";
import { matmulKernel, type MatmulTiles } from "../compiler/lower/matmul_template.ts";
import type { Plan, PlanBuffer } from "../plan/plan.ts";

/** One matmul problem: C[b] = op(A[b]) · op(B[b]) (+ bias, GELU), operands stored as `dtype`. */
export interface MatmulCase {
  batch: number;
  m: number;
  n: number;
  k: number;
  /** Storage type of A, B and C (f16: the loaders cast to f32, the epilogue rounds to f16). */
  dtype: "f32" | "f16";
  /** A stored as [batch, k, m] (read transposed) rather than [batch, m, k]; likewise B as [batch, n, k]. */
  transA?: boolean;
  transB?: boolean;
  /** Epilogue: `store` C as is, or `bias_gelu` = GELU(acc + bias[col]) in the tanh form. */
  epilogue?: "store" | "bias_gelu";
  tiles?: MatmulTiles;
  /** Forces the template's epilogue strategy. */
  mode?: "direct" | "staged";
  /** Name the epilogue's local the same in every call (the template must then stage it). */
  fixedLocalName?: boolean;
}

/** The kernel and a one-launch Plan for it (buffer ids: 0 A, 1 B, 2 C, 3 bias when present). */
export function buildCase(c: MatmulCase): { kernel: Kernel; plan: Plan } {
  const { batch, m, n, k, dtype } = c;
  const gelu = c.epilogue === "bias_gelu";
  const buffers: PlanBuffer[] = [];
  const bindings: KBinding[] = [];
  const buffer = (
    name: string,
    t: KStorage,
    shape: number[],
    role: PlanBuffer["role"],
    access: KBinding["access"],
  ) => {
    const elements = shape.reduce((x, y) => x * y, 1);
    const id = buffers.length;
    buffers.push({ id, name, dtype: t, shape, bytes: elements * (t === "f16" ? 2 : 4), role, slot: id });
    bindings.push({ name, buffer: id, t, access, elements });
    return name;
  };
  const A = buffer("A", dtype, c.transA ? [batch, k, m] : [batch, m, k], "input", "read");
  const B = buffer("B", dtype, c.transB ? [batch, n, k] : [batch, k, n], "input", "read");
  const C = buffer("C", dtype, [batch, m, n], "output", "write");
  const bias = gelu ? buffer("bias", "f32", [n], "input", "read") : "";
  // Row-major index of [b][i][j] in a [batch, rows, cols] tensor.
  let calls = 0;
  const at = (b: KExpr, i: KExpr, j: KExpr, rows: number, cols: number) =>
    add(mul(add(mul(b, i32(rows)), i), i32(cols)), j);
  const kernel = matmulKernel({
    name: `mm_${batch}x${m}x${n}x${k}_${dtype}${c.transA ? "_ta" : ""}${c.transB ? "_tb" : ""}${
      gelu ? "_gelu" : ""
    }`,
    about: [`bench/test case ${JSON.stringify({ ...c, tiles: undefined })}`],
    usesF16: dtype === "f16",
    batch,
    m,
    n,
    k,
    bindings,
    loadA: (b, row, col) =>
      cast(load(A, c.transA ? at(b, col, row, k, m) : at(b, row, col, m, k), dtype), "f32"),
    loadB: (b, row, col) =>
      cast(load(B, c.transB ? at(b, col, row, n, k) : at(b, row, col, k, n), dtype), "f32"),
    contiguousA: c.transA ? "row" : "col",
    contiguousB: c.transB ? "row" : "col",
    epilogue: (b, row, col, acc) => {
      const out = at(b, row, col, m, n);
      if (!gelu) return [store(C, out, cast(acc, dtype))];
      const xName = c.fixedLocalName ? "ep_x" : `ep_x${calls++}`;
      const x = ref(xName, "f32");
      const inner = mul(f32(GELU_C), add(x, mul(f32(0.044715), mul(x, mul(x, x)))));
      return [
        let_(xName, add(acc, load(bias, col, "f32"))),
        store(C, out, cast(mul(mul(f32(0.5), x), add(f32(1), un("tanh", inner))), dtype)),
      ];
    },
    tiles: c.tiles,
    epilogueMode: c.mode,
  });
  const wgsl = emitWGSL(kernel);
  const plan: Plan = {
    version: 2,
    graph: kernel.name,
    target: "lavapipe",
    language: "wgsl",
    buffers,
    slots: buffers.map((b) => ({ id: b.id, bytes: b.bytes })),
    inputs: Object.fromEntries(buffers.filter((b) => b.role === "input").map((b) => [b.name, b.id])),
    params: {},
    outputs: { C: 2 },
    kernels: [{
      name: kernel.name,
      kind: kernel.kind,
      bindings: kernel.bindings.map((b, index) => ({
        index,
        name: b.name,
        buffer: b.buffer,
        access: b.access,
      })),
      source: wgsl,
      about: kernel.about,
      bytesRead: buffers.filter((b) => b.role === "input").reduce((s, b) => s + b.bytes, 0),
      bytesWritten: buffers[2].bytes,
      flops: 2 * batch * m * n * k,
    }],
    steps: [{ op: "launch", kernel: 0 }],
    updates: [],
  };
  return { kernel, plan };
}

/** √(2/π), the GELU tanh-form constant. */
export const GELU_C = Math.sqrt(2 / Math.PI);

export const geluTanh = (x: number) => 0.5 * x * (1 + Math.tanh(GELU_C * (x + 0.044715 * x * x * x)));

/** The same plan with the launch repeated `reps` times in its one step. */
export function repeated(plan: Plan, reps: number): Plan {
  return { ...plan, steps: Array.from({ length: reps }, () => ({ op: "launch" as const, kernel: 0 })) };
}
