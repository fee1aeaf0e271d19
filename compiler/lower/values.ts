/**
 * Computes graph values inside a kernel: `valueAt(node, idx)` returns a kernel-IR expression for the
 * node's element at `idx`, loading it from a buffer when another kernel materialized it, computing it
 * (recursively) otherwise. Each computed value is bound to a local once per scope, so a value read twice
 * at the same index is computed once.
 */
import { type DType, type Graph, type NodeId, numel, type OpNameOf } from "../../ir/mod.ts";
import {
  bin,
  cast,
  i32,
  type KBinding,
  type KBinOp,
  type Kernel,
  type KernelKind,
  type KExpr,
  type KStmt,
  type KType,
  type KUnOp,
  let_,
  lit,
  load,
  ref,
  select,
  un,
} from "../kernel_ir/ir.ts";
import {
  broadcastOperand,
  clamp,
  exprKey,
  type Idx,
  idxKey,
  linearize,
  padOperand,
  permuteOperand,
  reshapeOperand,
  sliceOperand,
} from "./index_math.ts";
import type { FusedKernel } from "../fusion/types.ts";

/** Compute type of a stored dtype: floats are computed in f32 (f16/bf16 are storage formats). */
export function computeType(d: DType): KType {
  return d === "f16" || d === "bf16" ? "f32" : d;
}

export class LoweringError extends Error {}

/** A block of statements with its own memo of computed values (inner blocks see outer values). */
export class Scope {
  readonly stmts: KStmt[] = [];
  private readonly memo = new Map<string, KExpr>();
  constructor(readonly parent?: Scope, readonly pure = false) {}
  lookup(key: string): KExpr | undefined {
    return this.memo.get(key) ?? this.parent?.lookup(key);
  }
  remember(key: string, e: KExpr): void {
    this.memo.set(key, e);
  }
}

/**
 * The kernel-IR op of each elementwise graph op, keyed by the graph's op categories so that a new graph op
 * is a type error here until it has one; null marks the ops `compute` lowers by a case of its own.
 */
const UNARY: { readonly [K in OpNameOf<"unary">]: KUnOp | null } = {
  neg: "neg",
  abs: "abs",
  exp: "exp",
  log: "log",
  tanh: "tanh",
  erf: "erf",
  sqrt: "sqrt",
  rsqrt: "rsqrt",
  reciprocal: "reciprocal",
  not: "not",
  stop_gradient: null,
  cast: null,
};
const BINARY: { readonly [K in OpNameOf<"binary" | "compare">]: KBinOp } = {
  add: "add",
  sub: "sub",
  mul: "mul",
  div: "div",
  max: "max",
  min: "min",
  and: "and",
  or: "or",
  eq: "eq",
  ne: "ne",
  lt: "lt",
  le: "le",
  gt: "gt",
  ge: "ge",
};
const kernelUnary = (op: string) => (op in UNARY ? UNARY[op as keyof typeof UNARY] : null);
const kernelBinary = (op: string) => (op in BINARY ? BINARY[op as keyof typeof BINARY] : undefined);

export interface ValueContext {
  readonly graph: Graph;
  /** Nodes computed by this kernel (members). */
  readonly members: ReadonlySet<NodeId>;
  /** Nodes no kernel computes (inline sources and views): recomputed where read. */
  readonly computedAnywhere: (id: NodeId) => boolean;
  /** Plan buffer id of a materialized node. */
  readonly bufferOf: (id: NodeId) => number;
  /**
   * The dtype a materialized node's buffer holds (compiler/storage/storage_precision.ts), when it differs from
   * the node's graph dtype (an f32 activation stored f16); default: the graph dtype.
   */
  readonly storedType?: (id: NodeId) => DType;
}

/** The dtype `id`'s buffer holds under `ctx`: every load, store and binding of a node goes through this. */
export function storedTypeOf(ctx: ValueContext, id: NodeId): DType {
  return ctx.storedType?.(id) ?? ctx.graph.nodes[id].type.dtype;
}

/** What each lowering of a fused kernel starts from (compiler/lower/lower_kernel.ts lowerKernel). */
export interface KernelJob {
  readonly g: Graph;
  readonly k: FusedKernel;
  readonly ctx: ValueContext;
  readonly name: string;
  /** What the kernel fuses (describeKernel). */
  readonly about: string[];
  readonly usesF16: boolean;
}

/** The kernel a lowering built: `job`'s name and f16 use, `vb`'s bindings described after what it fuses. */
export function builtKernel(
  job: KernelJob,
  kind: KernelKind,
  vb: ValueBuilder,
  work: Pick<Kernel, "shared" | "workgroupSize" | "workgroups" | "body">,
): Kernel {
  const about = [...job.about, ...vb.describeBindings()];
  return { name: job.name, kind, bindings: vb.bindings, ...work, about, usesF16: job.usesF16 };
}

/** A reduction's starting value: 0 for a sum, -inf for a max. */
export function reduceInit(g: Graph, r: NodeId): KExpr {
  return g.nodes[r].op === "reduce_sum" ? lit(0, "f32") : lit(-Infinity, "f32");
}

/** How a reduction adds a term to its accumulator: add for a sum, max for a max. */
export function reduceCombine(g: Graph, r: NodeId): "add" | "max" {
  return g.nodes[r].op === "reduce_sum" ? "add" : "max";
}

export class ValueBuilder {
  private readonly bindingsByNode = new Map<NodeId, KBinding>();
  readonly bindings: KBinding[] = [];
  /** The graph node each binding holds, by binding index. */
  private readonly bindingNodes: NodeId[] = [];
  /** Values provided by the kernel template (reduction results, matmul accumulators). */
  readonly special = new Map<NodeId, (idx: Idx) => KExpr>();
  private tmp = 0;

  constructor(readonly ctx: ValueContext) {}

  /** The dtype `id`'s buffer holds (loads widen it to the compute type, stores round to it). */
  storedType(id: NodeId): DType {
    return storedTypeOf(this.ctx, id);
  }

  /** Binds a node's buffer to this kernel (once) and returns the binding's name. */
  bind(id: NodeId, access: KBinding["access"]): string {
    const have = this.bindingsByNode.get(id);
    if (have) {
      if (have.access !== access) {
        const merged = { ...have, access: "read_write" as const };
        this.bindings[this.bindings.indexOf(have)] = merged;
        this.bindingsByNode.set(id, merged);
      }
      return have.name;
    }
    const n = this.ctx.graph.nodes[id];
    const b: KBinding = {
      // Positional names keep the code of the same fusion identical in every layer (one file, one
      // pipeline); the kernel's header says which tensor each binding is.
      name: `b${this.bindings.length}`,
      buffer: this.ctx.bufferOf(id),
      t: this.storedType(id),
      access,
      elements: numel(n.type.shape),
    };
    this.bindingsByNode.set(id, b);
    this.bindings.push(b);
    this.bindingNodes.push(id);
    return b.name;
  }

  /**
   * Binds a plan buffer that holds no graph node (a GEMM's f32 scratch output, see lowerGemmEpilogue)
   * and returns the binding's name.
   */
  bindBuffer(buffer: number, t: KBinding["t"], access: KBinding["access"], elements: number, what: string) {
    const b: KBinding = { name: `b${this.bindings.length}`, buffer, t, access, elements };
    this.bindings.push(b);
    this.bindingNodes.push(-1);
    this.extraAbout.set(this.bindings.length - 1, what);
    return b.name;
  }
  private readonly extraAbout = new Map<number, string>();

  /** `binding i: tensor` lines for the kernel's description. */
  describeBindings(): string[] {
    return this.bindings.map((b, i) => {
      const id = this.bindingNodes[i];
      if (id < 0) return `binding ${i} (${b.access}): ${this.extraAbout.get(i)}`;
      const n = this.ctx.graph.nodes[id];
      const what = n.op === "input" || n.op === "param" ? `${n.op} ${n.attrs.name}` : `%${id} ${n.op}`;
      const stored = b.t === n.type.dtype ? "" : ` stored ${b.t}`;
      return `binding ${i} (${b.access}): ${what} ${n.type.dtype}[${n.type.shape.join(",")}]${stored}`;
    });
  }

  fresh(prefix: string): string {
    return `${prefix}${this.tmp++}`;
  }

  /** Binds `e` to a new local in `scope` (unless the scope is pure or `e` is trivial). */
  letIn(scope: Scope, prefix: string, e: KExpr): KExpr {
    if (scope.pure || e.k === "lit" || e.k === "ref" || e.k === "id") return e;
    const name = this.fresh(prefix);
    scope.stmts.push(let_(name, e));
    return ref(name, e.t);
  }

  /** Stores the value of `id` at `idx` (an index over its shape) into its buffer, converted to storage. */
  storeAt(scope: Scope, id: NodeId, idx: Idx): void {
    const n = this.ctx.graph.nodes[id];
    const name = this.bind(id, "write");
    const v = this.valueAt(scope, id, idx);
    scope.stmts.push({
      k: "store",
      buf: name,
      index: linearize(idx, n.type.shape),
      value: cast(v, this.storedType(id)),
    });
  }

  valueAt(scope: Scope, id: NodeId, idx: Idx): KExpr {
    const sp = this.special.get(id);
    if (sp) return sp(idx);
    const key = `${id}@${idxKey(idx)}`;
    const have = scope.lookup(key);
    if (have) return have;
    const n = this.ctx.graph.nodes[id];
    let v: KExpr;
    if (this.ctx.members.has(id) || this.ctx.computedAnywhere(id)) {
      v = this.compute(scope, id, idx);
    } else {
      const name = this.bind(id, "read");
      const t = this.storedType(id);
      v = cast(load(name, linearize(idx, n.type.shape), t), computeType(t));
    }
    v = this.letIn(scope, "v", v);
    scope.remember(key, v);
    return v;
  }

  private compute(scope: Scope, id: NodeId, idx: Idx): KExpr {
    const g = this.ctx.graph;
    const n = g.nodes[id];
    const ct = computeType(n.type.dtype);
    const operand = (i: number, at: Idx) => this.valueAt(scope, n.inputs[i], at);
    const inShape = (i: number) => g.nodes[n.inputs[i]].type.shape;
    const un1 = kernelUnary(n.op);
    if (un1) return un(un1, operand(0, idx));
    const bin1 = kernelBinary(n.op);
    if (bin1) return bin(bin1, operand(0, idx), operand(1, idx));
    switch (n.op) {
      case "const":
        return lit(n.attrs.value as number, ct);
      case "iota":
        return cast(idx.dims[n.attrs.axis as number], ct);
      case "stop_gradient":
        return operand(0, idx);
      case "where":
        return select(operand(0, idx), operand(1, idx), operand(2, idx));
      case "cast":
        return convert(operand(0, idx), g.nodes[n.inputs[0]].type.dtype, n.attrs.to as DType);
      case "random_uniform": {
        const key = n.inputs[0];
        const seed = this.valueAt(scope, key, { dims: [i32(0)], lin: i32(0) });
        const step = this.valueAt(scope, key, { dims: [i32(1)], lin: i32(1) });
        const draw = (t: "f32" | "v4f32", index: KExpr): KExpr => ({
          k: "philox",
          t,
          seed: cast(seed, "u32"),
          step: cast(step, "u32"),
          stream: n.attrs.stream as number,
          index: cast(index, "u32"),
        });
        if (idx.quad) {
          // Four consecutive elements computed together: one Philox block serves all four.
          const key = `philox4:${id}@${exprKey(idx.quad.base)}`;
          let block = scope.lookup(key);
          if (!block) {
            block = this.letIn(scope, "rnd", draw("v4f32", idx.quad.base));
            scope.remember(key, block);
          }
          return { k: "lane", t: "f32", a: block, lane: idx.quad.lane };
        }
        return draw("f32", linearize(idx, n.type.shape));
      }
      case "broadcast":
        return operand(0, broadcastOperand(idx, inShape(0), n.type.shape));
      case "reshape":
        return operand(0, reshapeOperand(idx, inShape(0), n.type.shape));
      case "permute":
        return operand(0, permuteOperand(idx, n.attrs.perm as number[]));
      case "slice":
        return operand(0, sliceOperand(idx, n.attrs.start as number[]));
      case "pad": {
        const p = padOperand(idx, n.attrs.low as number[], inShape(0), n.type.shape);
        const v = operand(0, p.idx);
        return p.inRange ? select(p.inRange, v, lit(0, ct)) : v;
      }
      case "concat":
        return this.concat(scope, id, idx);
      case "gather": {
        const [table, ids] = n.inputs;
        const ri = g.nodes[ids].type.shape.length;
        const rows = g.nodes[table].type.shape[0];
        const row = clamp(
          cast(this.valueAt(scope, ids, { dims: idx.dims.slice(0, ri) }), "i32"),
          0,
          rows - 1,
        );
        return this.valueAt(scope, table, { dims: [row, ...idx.dims.slice(ri)] });
      }
      default:
        throw new LoweringError(`cannot compute %${id} ${n.op} inside a kernel at this index`);
    }
  }

  private concat(scope: Scope, id: NodeId, idx: Idx): KExpr {
    const g = this.ctx.graph;
    const n = g.nodes[id];
    const axis = n.attrs.axis as number;
    const pieces = n.inputs.map((inp) => g.nodes[inp].type.shape);
    let offset = 0;
    const parts: { cond: KExpr; value: KExpr }[] = [];
    pieces.forEach((shape, i) => {
      const local = bin("sub", idx.dims[axis], i32(offset));
      const dims = idx.dims.map((e, d) => (d === axis ? clamp(local, 0, shape[axis] - 1) : e));
      parts.push({
        cond: bin("lt", idx.dims[axis], i32(offset + shape[axis])),
        value: this.valueAt(scope, n.inputs[i], { dims }),
      });
      offset += shape[axis];
    });
    let v = parts[parts.length - 1].value;
    for (let i = parts.length - 2; i >= 0; i--) v = select(parts[i].cond, parts[i].value, v);
    return v;
  }
}

/** Conversion with the reference interpreter's semantics (truncation for ints; rounding for f16). */
function convert(x: KExpr, from: DType, to: DType): KExpr {
  const ct = computeType(to);
  if (to === "bool") return bin("ne", x, lit(0, x.t));
  if (from === "bool") return select(x, lit(1, ct), lit(0, ct));
  if (to === "f16" || to === "bf16") return cast(cast(x, to), "f32");
  return cast(x, ct);
}
