/**
 * Low-precision weight copies for library GEMMs. A mixed-precision GEMM reads its weight as
 * `cast(w, f16)` of an f32 parameter. The template GEMM rounds on load, but a library GEMM (cuBLASLt)
 * reads the stored bytes as they are and can only take an f16/bf16 buffer (gemm_library.ts explains why
 * FAST_16F is not used instead). So, where GEMMs run on the library, every GEMM reading the weight,
 * forward and backward, reads a stored low copy (2 bytes per element instead of 4).
 *
 * In a training step the copy is optimizer state (`keptCopies`): an input `low:<param>` (plan/low_copies.ts)
 * that the GEMMs read instead of the cast, and that the optimizer's last pass rewrites as the cast of the
 * new weights, in registers beside the f32 ones it writes anyway (2 bytes per element more in a kernel
 * that runs regardless) instead of a kernel per weight that reads 4 bytes and writes 2 at the start of each
 * step. The copies of one flat parameter vector form a flat vector of their own, `low:flat.params`,
 * assembled in place from the copies exactly as `flat.params` is from the parameters (fusion/in_place.ts),
 * so each GEMM binds its own copy at an offset (one kernel source for the same GEMM in every layer) and the
 * update `new:low:flat.params = cast(new:flat.params)` is one more output of the elementwise final pass.
 * The f32 master weights stay the truth: the update rounds them each step (a step skipped on overflow
 * rounds the unchanged weights, so the copy is unchanged too), and whoever writes the weights writes the
 * copy from the same values (engine/low_copy_refresh.ts), so a first step, a resume from a checkpoint (which holds
 * no copy) and weights set between steps all start from cast(master).
 *
 * Where a weight has no flat vector to ride on (no optimizer in the graph) or its copy cannot start on the
 * binding alignment inside the copies' vector (an f16 copy at an odd multiple of 64 elements: the chunk of
 * a tiny model's layout), its cast is materialized instead (`castRoots`): a kernel of its own writes the
 * rounded weight once per step. One kernel per weight rather than one over the flat vector, for the same
 * reason as above.
 *
 * Parameters every use of which is such a rounding (an inference graph's weights) need no copy: the
 * storage policy stores them low (storage_precision.ts `weightsReadOnlyLow`). The graph is unchanged, so
 * the values are the original ones.
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
