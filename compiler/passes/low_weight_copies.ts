/**
 * Low-precision weight copies for library GEMMs: cuBLASLt reads stored bytes as they are, so where GEMMs run
 * on the library every GEMM reading a mixed-precision weight `cast(w, f16)` reads a stored f16/bf16 copy. In
 * training the copy is optimizer state `low:<param>` that the optimizer's last pass rewrites from the new
 * f32 weights, which stay the truth; without a flat vector to ride on, the cast is a kernel of its own
 * (`castRoots`). Why this shape: DESIGN.md, notes: compiler/passes/low_weight_copies.ts.
 */
import { byteSize, type DType, Graph, type Node, type NodeId, numel } from "../../ir/mod.ts";
import { PLAN_OFFSET_ALIGN, UPDATE_PREFIX } from "../../plan/plan.ts";
import { LOW_COPY_PREFIX } from "../../plan/low_copies.ts";
import { GraphEditor } from "../graph/edit.ts";
import { copyNode, copyOutputs } from "../graph/rebuild.ts";
import { usersOf, VIEW_OPS, weightsReadOnlyLow } from "../graph/users.ts";

/** Whether `id` is read by a matmul, directly or through views. */
function feedsMatmul(g: Graph, users: readonly NodeId[][], id: NodeId): boolean {
  return users[id].some((u) =>
    g.nodes[u].op === "matmul" || (VIEW_OPS.has(g.nodes[u].op) && feedsMatmul(g, users, u))
  );
}

/** The casts of f32 parameters to `low` that GEMMs read and that fusion must materialize. */
export function lowWeightCopies(g: Graph, low: DType): ReadonlySet<NodeId> {
  if (low === "f32") return new Set();
  const users = usersOf(g);
  const storedLow = new Set(weightsReadOnlyLow(g, low, users));
  const isWeightCast = (n: Node) => {
    if (n.op !== "cast" || n.attrs.to !== low) return false;
    const src = g.nodes[n.inputs[0]];
    return src.op === "param" && src.type.dtype === "f32" && !storedLow.has(src.id) &&
      feedsMatmul(g, users, n.id);
  };
  return new Set(g.nodes.filter(isWeightCast).map((n) => n.id));
}

/** A flat parameter vector the step updates: `name` (a concat output) and the node of `new:<name>`. */
interface FlatVector {
  readonly name: string;
  readonly concat: NodeId;
  readonly update: NodeId;
  /** Each parameter operand's element offset inside the vector. */
  readonly offsets: ReadonlyMap<NodeId, number>;
}

/** Follows reshapes down to the tensor an operand reads. */
function throughReshapes(g: Graph, id: NodeId): NodeId {
  let at = id;
  while (g.nodes[at].op === "reshape") at = g.nodes[at].inputs[0];
  return at;
}

/** The graph's updated flat f32 vectors made of parameters (the optimizer's `flat.params`, per group). */
function flatParamVectors(g: Graph): FlatVector[] {
  const out: FlatVector[] = [];
  for (const [name, id] of g.outputs) {
    const n = g.nodes[id];
    const update = g.outputs.get(UPDATE_PREFIX + name);
    if (update === undefined || n.op !== "concat" || n.type.shape.length !== 1 || n.type.dtype !== "f32") {
      continue;
    }
    const offsets = new Map<NodeId, number>();
    let offset = 0;
    for (const operand of n.inputs) {
      const base = throughReshapes(g, operand);
      if (g.nodes[base].op === "param") offsets.set(base, offset);
      offset += numel(g.nodes[operand].type.shape);
    }
    out.push({ name, concat: id, update, offsets });
  }
  return out;
}

export interface WeightCopies {
  /** The graph, with kept copies as inputs and their flat vector's update as outputs. */
  readonly graph: Graph;
  /** Weight casts kept as state: read from `low:<param>`, written by the optimizer's last pass. */
  readonly kept: number;
  /** Weight casts (node ids of `graph`) that remain, each to be materialized once per step. */
  readonly castRoots: ReadonlySet<NodeId>;
}

/**
 * The weight casts GEMMs read, as copies kept between steps where the graph updates a flat parameter
 * vector holding the weight at an offset the copies' vector can bind, else as casts to materialize.
 */
export function keptCopies(g: Graph, low: DType): WeightCopies {
  const casts = lowWeightCopies(g, low);
  const vectors = flatParamVectors(g);
  const vectorOf = new Map<NodeId, FlatVector>();
  for (const v of vectors) for (const p of v.offsets.keys()) vectorOf.set(p, v);
  // A copy must start on the binding alignment inside its vector to be placed there (fusion/in_place.ts).
  const keep = [...casts].filter((c) => {
    const p = g.nodes[c].inputs[0];
    const v = vectorOf.get(p);
    return v !== undefined && (v.offsets.get(p)! * byteSize(low)) % PLAN_OFFSET_ALIGN === 0;
  });
  if (keep.length === 0) return { graph: g, kept: 0, castRoots: casts };

  const out = new Graph(g.name, g.precision);
  const b = new GraphEditor(out);
  b.loc = "compiler/passes/low_weight_copies.ts";
  const kept = new Set(keep);
  const copyOf = new Map<NodeId, NodeId>(); // param (old id) -> its copy input (new id)
  const newId = new Int32Array(g.nodes.length);
  for (const n of g.nodes) {
    if (kept.has(n.id)) {
      const p = g.nodes[n.inputs[0]];
      let copy = copyOf.get(p.id);
      if (copy === undefined) {
        copy = out.add("input", [], { name: LOW_COPY_PREFIX + String(p.attrs.name) }, {
          shape: [...p.type.shape],
          dtype: low,
        });
        copyOf.set(p.id, copy);
      }
      newId[n.id] = copy;
    } else {
      newId[n.id] = copyNode(out, n, n.inputs.map((i) => newId[i]));
    }
  }
  copyOutputs(g, out, newId);
  for (const v of vectors) {
    if (![...v.offsets.keys()].some((p) => copyOf.has(p))) continue;
    // Each copy where its parameter is; zeros elsewhere. The update rounds the whole vector, so those
    // ranges then hold the other parameters rounded, which nothing reads (cheaper than a masked store).
    const parts = g.nodes[v.concat].inputs.map((operand) => {
      const copy = copyOf.get(throughReshapes(g, operand));
      const size = numel(g.nodes[operand].type.shape);
      return copy === undefined ? b.full(0, [size], low) : b.reshape(copy, [size]);
    });
    out.setOutput(LOW_COPY_PREFIX + v.name, b.node("concat", parts, { axis: 0 }));
    out.setOutput(UPDATE_PREFIX + LOW_COPY_PREFIX + v.name, b.cast(newId[v.update], low));
  }
  const castRoots = new Set([...casts].filter((c) => !kept.has(c)).map((c) => newId[c]));
  return { graph: out, kept: kept.size, castRoots };
}
