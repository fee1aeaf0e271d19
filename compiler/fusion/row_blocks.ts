/**
 * Row blocks: a LayerNorm backward as one kernel on a GPU. A column sum's first pass (per-part sums of dY
 * and dY·x̂, which also computes and stores dY) merges into the row kernel that reads dY and x back: a
 * workgroup walks one part's rows doing the row kernel's work, each thread adding its columns into the part
 * sums, so dY is not stored, x is read once and one launch replaces two (the conditions: DESIGN.md, notes:
 * compiler/fusion/row_blocks.ts).
 */
import { type Graph, type NodeId, numel } from "../../ir/mod.ts";
import { blockRows } from "../targets/shapes.ts";
import type { TargetProfile } from "../targets/profiles.ts";
import { bindingCount } from "./binding_budget.ts";
import { isBlockPartial } from "./kernel_facts.ts";
import { mergeState } from "./siblings.ts";
import type { FusedKernel, FusionResult } from "./types.ts";
import { usersOf } from "../graph/users.ts";

interface FirstPass {
  readonly block: number;
  readonly rows: number;
  readonly rowLen: number;
  readonly partials: readonly NodeId[];
}

/** K1's geometry if it is a first pass that can join a row kernel (see the module comment). */
function firstPass(g: Graph, k: FusedKernel, users: readonly NodeId[][]): FirstPass | undefined {
  if (k.kind !== "reduce" || k.rowBlock || k.axes?.length !== 1 || k.axes[0] !== 1) return undefined;
  if (k.space.length < 3 || k.space[1] < 2) return undefined;
  const block = k.space[1];
  const elements = numel(k.space);
  const reductions = [...k.members].filter((m) => g.nodes[m].op.startsWith("reduce_"));
  if (!reductions.every((m) => isBlockPartial(g, m, block))) return undefined;
  if (reductions.some((m) => users[m].some((u) => k.members.has(u)))) return undefined;
  const partials = k.roots.filter((x) => reductions.includes(x));
  if (partials.length === 0 || partials.length !== reductions.length) return undefined;
  if (!k.roots.every((x) => partials.includes(x) || numel(g.nodes[x].type.shape) === elements)) {
    return undefined;
  }
  return { block, rows: k.space[0] * block, rowLen: numel(k.space.slice(2)), partials };
}

/** Does row kernel K2 have K1's rows, in a layout the profile can block? */
function fitsRowKernel(k: FusedKernel, p: FirstPass, profile: TargetProfile): boolean {
  if (k.kind !== "reduce" || k.rowBlock || !k.axes?.length) return false;
  const first = k.space.length - k.axes.length;
  if (first === 0 || !k.axes.every((a, i) => a === first + i)) return false;
  const rowLen = numel(k.space.slice(first));
  const rows = numel(k.space.slice(0, first));
  // No more rows a workgroup than still fill the device (blockRows): a first pass whose parts were sized
  // for itself (column_sums.ts partsFor, 16 rows or more) walked a part a workgroup would leave most of
  // it idle (BERT-large at batch 8 with parts of 16 rows: predicted 1.1 ms a step slower than apart).
  return rowLen === p.rowLen && rows === p.rows && p.block <= blockRows(profile, rows, rowLen);
}

export function mergeRowBlocks(
  g: Graph,
  r: FusionResult,
  profile: TargetProfile,
  takeFuel?: () => boolean,
  maxBindings = Infinity,
  maxBindingBytes?: number,
): FusionResult {
  const { kernels, alive, reads, writerOf, preds, dependsOn, decisions, finish } = mergeState(g, r);
  const users = usersOf(g);
  const outputs = new Set(g.outputs.values());
  /** Is `x` a graph output, directly or through views that no kernel computes? */
  const reachesOutput = (x: NodeId, seen = new Set<NodeId>()): boolean => {
    if (outputs.has(x)) return true;
    if (seen.has(x)) return false;
    seen.add(x);
    return users[x].some((u) => r.kernelOf[u] === -1 && !r.materialized.has(u) && reachesOutput(u, seen));
  };
  const dropped = new Set<NodeId>();
  let merged = 0;
  kernels.forEach((k1, i) => {
    const p = firstPass(g, k1, users);
    if (!p) return;
    for (let j = 0; j < kernels.length && alive[i]; j++) {
      const k2 = kernels[j];
      if (j === i || !alive[j] || ![...reads[j]].some((x) => writerOf.get(x) === i)) continue;
      if (!fitsRowKernel(k2, p, profile) || p.partials.some((x) => reads[j].has(x))) continue;
      if ([...preds(j)].some((q) => q !== i && dependsOn(q, i))) continue;
      const readElsewhere = (x: NodeId) =>
        reads.some((rd, m) => m !== i && m !== j && alive[m] && rd.has(x)) ||
        r.inPlace.placed.has(x) || reachesOutput(x);
      const kept = k1.roots.filter((x) => p.partials.includes(x) || readElsewhere(x));
      const gone = k1.roots.filter((x) => !kept.includes(x));
      const reading = [...reads[i], ...reads[j]].filter((x) => !k1.roots.includes(x));
      const count = bindingCount(g, new Set([...reading, ...kept, ...k2.roots]), maxBindingBytes);
      if (count > maxBindings) {
        decisions.push({
          producer: k1.roots[0],
          consumerKernel: j,
          ok: false,
          reason: `row-block merge would bind ${count} buffers`,
        });
        continue;
      }
      if (takeFuel && !takeFuel()) return;
      for (const m of k1.members) k2.members.add(m);
      k2.roots.push(...kept);
      k2.rowBlock = p.block;
      for (const x of kept) writerOf.set(x, j);
      for (const x of gone) {
        writerOf.delete(x);
        dropped.add(x);
      }
      reads[j] = new Set(reading.filter((x) => writerOf.get(x) !== j));
      alive[i] = false;
      decisions.push({ producer: k1.roots[0], consumerKernel: j, ok: true, reason: "" });
      merged++;
    }
  });
  if (merged === 0) return r;
  const out = finish();
  return { ...out, materialized: new Set([...out.materialized].filter((x) => !dropped.has(x))) };
}
