/**
 * Producer-consumer fusion's decisions: may a node, all of whose users are in one kernel, be computed
 * inside it (and, when the kernel must also write it, stored there)? These are pure questions: a verdict
 * says yes (with the `Adaptation` the kernel undergoes, e.g. a loop kernel becoming a row kernel) or no
 * with the reason, and changes nothing; `applyJoin` carries out a yes.
 */
import { type Graph, type NodeId, numel, sameShape } from "../../ir/mod.ts";
import { isMovement } from "../../ir/ops.ts";
import { ANY, describeNeeds, ELEM, OPERAND, parseRowCandidate, ROW } from "./needs.ts";
import { type Adaptation, type FusedKernel, type Need, no, type Verdict, YES } from "./types.ts";

/** Reduce kernels with fewer rows do not also write large element-level outputs (see storableHere). */
export const MIN_ROWS_FOR_ELEMENT_OUTPUTS = 16;

/** What a decision reads of a kernel. */
type KernelView = Readonly<Pick<FusedKernel, "kind" | "space" | "axes" | "anchor">> & {
  readonly members: ReadonlySet<NodeId>;
};
type Needs = ReadonlyMap<NodeId, ReadonlySet<Need>>;

const ROW_ONLY: ReadonlySet<Need> = new Set([ROW]);

/** The kernel as it would be after `a`. */
function adapted(k: KernelView, a: Adaptation | undefined): KernelView {
  return a?.kernel ? { ...k, ...a.kernel, members: k.members } : k;
}

/** `a`, then `b` (b was decided on the kernel as `a` leaves it). */
function compose(a: Adaptation | undefined, b: Adaptation | undefined): Adaptation | undefined {
  if (!a) return b;
  if (!b) return a;
  return {
    kernel: { ...a.kernel, ...b.kernel },
    need: b.need ?? a.need,
    membersToRow: a.membersToRow || b.membersToRow,
  };
}

/**
 * May `id` join kernel `k`, read there as `need`? When it is also written by `k` (`extraRoot`: read by
 * several kernels, or a graph output), it must be storable where `k` iterates, too.
 */
export function decideJoin(
  g: Graph,
  id: NodeId,
  k: KernelView,
  need: ReadonlySet<Need>,
  needs: Needs,
  extraRoot: boolean,
): Verdict {
  const stored = extraRoot ? storableHere(g, id, k, need) : YES;
  if (!stored.ok) return stored;
  const first = stored.adapt;
  const joined = canJoin(g, id, adapted(k, first), first?.need ?? need, needs);
  if (!joined.ok) return joined;
  const adapt = compose(first, joined.adapt);
  return adapt ? { ok: true, adapt } : YES;
}

/** Carries out a yes: `id` becomes a member of `k` (an extra root when `extraRoot`), read as `need`. */
export function applyJoin(
  k: FusedKernel,
  id: NodeId,
  need: ReadonlySet<Need>,
  adapt: Adaptation | undefined,
  needs: Map<NodeId, Set<Need>>,
  extraRoot: boolean,
): void {
  if (adapt?.kernel) Object.assign(k, adapt.kernel);
  if (adapt?.membersToRow) {
    for (const m of k.members) {
      const ms = needs.get(m)!;
      if (ms.delete(ELEM)) ms.add(ROW);
    }
  }
  if (extraRoot) k.roots.push(id);
  k.members.add(id);
  needs.set(id, new Set(adapt?.need ?? need));
}

/**
 * May `id` (all of whose users are in kernel `k`) be computed inside `k`? A loop kernel that absorbs a
 * matmul or a reduction adapts (becomes a matmul or reduce kernel); the verdict says how.
 */
export function canJoin(g: Graph, id: NodeId, k: KernelView, need: ReadonlySet<Need>, needs: Needs): Verdict {
  const n = g.nodes[id];
  if (need.has(OPERAND) && !(isMovement(n.op) || n.op === "cast" || n.op === "stop_gradient")) {
    return no(
      `a matmul operand may be read through movement and casts only; ${n.op} would be recomputed per tile`,
    );
  }
  if (n.op === "scatter_add") return no("scatter_add writes whole rows; its result is materialized");
  if (n.op === "matmul") {
    if (k.kind !== "loop") return no(`a matmul epilogue cannot go into a ${k.kind} kernel`);
    if (need.size !== 1 || !need.has(ELEM)) {
      return no(`the matmul result is read as ${describeNeeds(need)}, not elementwise`);
    }
    if (numel(n.type.shape) !== numel(k.space)) {
      return no("the epilogue iterates over a different number of elements");
    }
    return { ok: true, adapt: { kernel: { kind: "matmul", anchor: id } } };
  }
  if (!(n.op === "reduce_sum" || n.op === "reduce_max")) return YES;

  // A reduction: it must be read at the row level of a kernel reducing the same tensor over the same axes.
  if (k.kind === "matmul" || k.kind === "scatter") {
    return no(`a ${k.kind} kernel does not contain reductions`);
  }
  const inShape = g.nodes[n.inputs[0]].type.shape;
  const axes = n.attrs.axes as number[];
  const sameAxes = (a: readonly number[] | undefined) =>
    a !== undefined && a.length === axes.length && a.every((x, i) => x === axes[i]);
  const levels = [...need].map((x) => {
    const rc = parseRowCandidate(x);
    if (rc) return sameShape(rc.shape, inShape) && sameAxes(rc.axes) ? "row" : "other-row";
    return x;
  });
  if (levels.some((l) => l !== "row" && l !== ROW && l !== ELEM)) {
    return no(`its result is read as ${describeNeeds(need)}: the reduction would be recomputed per element`);
  }
  const rowLevel = levels.every((l) => l === "row" || l === ROW);
  if (k.kind === "reduce") {
    if (!sameShape(k.space, inShape) || !sameAxes(k.axes)) {
      return no(
        `the kernel reduces [${k.space}] over axes [${k.axes}], this reduces [${inShape}] over [${axes}]`,
      );
    }
    if (!rowLevel) return no("its result is read at the element level of a reduce kernel");
    return { ok: true, adapt: { need: ROW_ONLY } };
  }
  // k is a loop kernel.
  if (rowLevel) {
    if (numel(k.space) !== numel(inShape)) return no("the reduced tensor and the kernel differ in size");
    return joinAtRowLevel(inShape, axes);
  }
  if (!levels.every((l) => l === ELEM)) return no(`its result is read as ${describeNeeds(need)}`);
  // Read elementwise by a kernel over the reduced shape: that kernel becomes the reduction's epilogue,
  // computed once per row.
  if (numel(k.space) !== numel(n.type.shape)) return no("the kernel iterates over a different shape");
  for (const m of k.members) {
    const ms = needs.get(m)!;
    if ([...ms].some((x) => x !== ELEM && x !== ANY)) {
      return no("the kernel's members are read at several levels; cannot turn it into a row epilogue");
    }
  }
  return { ok: true, adapt: { ...joinAtRowLevel(inShape, axes).adapt, membersToRow: true } };
}

/**
 * A node the kernel must also write (an extra root) is stored where the kernel iterates: at each element
 * of its space, or once per row of a reduce kernel. A node read at any other index cannot be.
 */
export function storableHere(g: Graph, id: NodeId, k: KernelView, need: ReadonlySet<Need>): Verdict {
  const size = numel(g.nodes[id].type.shape);
  const only = need.size === 1 ? [...need][0] : undefined;
  if (only === ELEM && size === numel(k.space)) {
    // A reduction with few rows runs on few workgroups; element-level outputs there would lose the
    // parallelism of a kernel of their own (a loss summed over a whole activation, say).
    const rows = k.kind === "reduce" ? numel(k.space) / numel(k.axes!.map((a) => k.space[a])) : Infinity;
    if (rows < MIN_ROWS_FOR_ELEMENT_OUTPUTS && size >= 65536) {
      return no(`the kernel reduces to ${rows} row(s); writing ${size} elements there would serialize them`);
    }
    return YES;
  }
  if (only === ROW && k.kind === "reduce") return YES;
  // Read through a broadcast from this reduce kernel's rows: that is a row-level value here.
  const rc = only === undefined ? undefined : parseRowCandidate(only);
  if (rc && k.kind === "reduce" && sameShape(rc.shape, k.space) && rc.axes.join() === k.axes!.join()) {
    return YES;
  }
  // A loop kernel reading a per-row value through a broadcast (LayerNorm's 1/σ, softmax's sum) becomes a
  // row kernel over those rows, which computes the value once per row and can write it — and can then take
  // the reductions that produce it.
  if (rc && k.kind === "loop" && numel(rc.shape) === numel(k.space)) {
    // Not when there would be few rows: a scalar broadcast over a whole vector (the optimizer's overflow
    // flag) would turn an elementwise kernel into one workgroup walking every element.
    const rows = numel(rc.shape) / numel(rc.axes.map((a) => rc.shape[a]));
    if (rows < MIN_ROWS_FOR_ELEMENT_OUTPUTS && numel(k.space) >= 65536) {
      return no(
        `it is a value per row of ${rows} row(s); a row kernel over ${
          numel(k.space)
        } elements would serialize them`,
      );
    }
    return joinAtRowLevel(rc.shape, rc.axes);
  }
  return no(`it is read as ${describeNeeds(need)} here, so this kernel cannot also write it`);
}

/** The kernel becomes a row kernel reducing `axes` of `space`, with the joining node read at row level. */
function joinAtRowLevel(space: readonly number[], axes: readonly number[]) {
  return { ok: true as const, adapt: { kernel: { kind: "reduce" as const, space, axes }, need: ROW_ONLY } };
}
