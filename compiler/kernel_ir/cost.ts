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
  switch (e.k) {
    case "load":
      c.loads.set(e.buf, (c.loads.get(e.buf) ?? 0) + w * lanesOf(e.t));
      countExpr(e.index, w, c);
      return;
    case "sload":
      countExpr(e.index, w, c);
      return;
    case "un":
      c.flops += w * floatLanes(e.t);
      countExpr(e.a, w, c);
      return;
    case "bin":
      if (countsFlops(e.op)) c.flops += w * floatLanes(e.a.t);
      countExpr(e.a, w, c);
      countExpr(e.b, w, c);
      return;
    case "select":
      countExpr(e.cond, w, c);
      countExpr(e.a, w, c);
      countExpr(e.b, w, c);
      return;
    case "cast":
    case "splat":
    case "lane":
      countExpr(e.a, w, c);
      return;
    case "vec":
      for (const p of e.parts) countExpr(p, w, c);
      return;
    case "philox":
      countExpr(e.seed, w, c);
      countExpr(e.step, w, c);
      countExpr(e.index, w, c);
      return;
    default:
      return;
  }
}

function countStmts(stmts: readonly KStmt[], w: number, c: Counts): void {
  for (const s of stmts) {
    switch (s.k) {
      case "let":
        countExpr(s.init, w, c);
        break;
      case "set":
        countExpr(s.value, w, c);
        break;
      case "store":
        c.stores.set(s.buf, (c.stores.get(s.buf) ?? 0) + w * lanesOf(s.value.t));
        countExpr(s.index, w, c);
        countExpr(s.value, w, c);
        break;
      case "sstore":
        countExpr(s.index, w, c);
        countExpr(s.value, w, c);
        break;
      case "for":
        countStmts(s.body, w * tripCount(s), c);
        break;
      case "if": {
        countExpr(s.cond, w, c);
        // `if (gid < n)` guards the spare threads of the last workgroup: only n run the body.
        const guard = s.cond.k === "bin" && s.cond.op === "lt" && s.cond.a.k === "id" &&
          s.cond.a.which === "gid" &&
          s.cond.b.k === "lit";
        countStmts(
          s.then,
          guard && s.cond.k === "bin" && s.cond.b.k === "lit" ? Math.min(w, s.cond.b.v) : w,
          c,
        );
        if (s.else) countStmts(s.else, w, c);
        break;
      }
      case "wg_reduce":
        countExpr(s.value, w, c);
        break;
      default:
        break;
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
