/**
 * The traffic and work model of the fusion report: how many bytes a kernel moves to and from memory and
 * how many floating-point operations it does, counted statically on the kernel IR. Each load or store
 * site is weighted by how often it runs, and a buffer's traffic is capped at its size ("unique bytes
 * touched", the usual roofline convention). A vector load or store moves four elements, and a vector
 * operation is four operations (DESIGN.md, notes: compiler/kernel_ir/cost.ts).
 */
import { byteSize } from "../../ir/mod.ts";
import {
  K_BINARY,
  type KBinOp,
  type Kernel,
  type KExpr,
  type KStmt,
  type KType,
  lanesOf,
  laneType,
} from "./ir.ts";
import { exprChildren, stmtExprs } from "./walk.ts";

interface Counts {
  loads: Map<string, number>;
  stores: Map<string, number>;
  flops: number;
}

/** Arithmetic on numbers counts as floating-point work; comparisons, logic and (integer) mod do not. */
const countsFlops = (op: KBinOp) => K_BINARY[op].operands === "number";

/** Floating-point operations one op on a value of type `t` does (0 for integers and bools). */
const floatLanes = (t: KType) => (laneType(t) === "f32" || laneType(t) === "f16" ? lanesOf(t) : 0);

function tripCount(s: Extract<KStmt, { k: "for" }>): number {
  if (s.to.k !== "lit" || s.step.k !== "lit" || s.step.v <= 0) return 1;
  const from = s.from.k === "lit" ? s.from.v : 0; // a thread-dependent start averages to ~0 per thread
  return Math.max(0, Math.ceil((s.to.v - from) / s.step.v));
}

function countExpr(e: KExpr, w: number, c: Counts): void {
  if (e.k === "load") c.loads.set(e.buf, (c.loads.get(e.buf) ?? 0) + w * lanesOf(e.t));
  if (e.k === "un") c.flops += w * floatLanes(e.t);
  if (e.k === "bin" && countsFlops(e.op)) c.flops += w * floatLanes(e.a.t);
  for (const x of exprChildren(e)) countExpr(x, w, c);
}

/** n of a guard `gid < n`, which the spare threads of the last workgroup fail: only n run its body. */
function gidBound(e: KExpr): number | undefined {
  return e.k === "bin" && e.op === "lt" && e.a.k === "id" && e.a.which === "gid" && e.b.k === "lit"
    ? e.b.v
    : undefined;
}

/** A loop's bounds are not counted, only its body (`tripCount` times). */
function countStmts(stmts: readonly KStmt[], w: number, c: Counts): void {
  for (const s of stmts) {
    if (s.k === "for") {
      countStmts(s.body, w * tripCount(s), c);
      continue;
    }
    if (s.k === "store") c.stores.set(s.buf, (c.stores.get(s.buf) ?? 0) + w * lanesOf(s.value.t));
    for (const e of stmtExprs(s)) countExpr(e, w, c);
    if (s.k === "if") {
      const n = gidBound(s.cond);
      countStmts(s.then, n === undefined ? w : Math.min(w, n), c);
      if (s.else) countStmts(s.else, w, c);
    }
  }
}

export function kernelCost(k: Kernel): { bytesRead: number; bytesWritten: number; flops: number } {
  const c: Counts = { loads: new Map(), stores: new Map(), flops: 0 };
  countStmts(k.body, k.workgroups * k.workgroupSize, c);
  let bytesRead = 0, bytesWritten = 0;
  for (const b of k.bindings) {
    const per = byteSize(b.t);
    bytesRead += Math.min(c.loads.get(b.name) ?? 0, b.elements) * per;
    bytesWritten += Math.min(c.stores.get(b.name) ?? 0, b.elements) * per;
  }
  return { bytesRead, bytesWritten, flops: Math.round(c.flops) };
}
