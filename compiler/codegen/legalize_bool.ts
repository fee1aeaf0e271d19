/**
 * Legalize rule of both targets "bool storage": bool bindings are stored as u32 (bool is not host-shareable
 * in WGSL, and the runtimes keep one buffer layout for both targets). Loads compare with 0u, stores select
 * 1u/0u, lane by lane for vector bindings.
 */
import {
  bin,
  isVector,
  type Kernel,
  type KExpr,
  type KStmt,
  type KType,
  lit,
  load,
  select,
  splat,
  store,
} from "../kernel_ir/ir.ts";
import { mapStmtExprs, mapStmts } from "../kernel_ir/walk.ts";

export function boolStorageToU32(k: Kernel): Kernel {
  const boolBufs = new Set(k.bindings.filter((b) => b.t === "bool").map((b) => b.name));
  if (boolBufs.size === 0) return k;
  // On vector bindings the loads and stores are v4bool and the constants are splat.
  const u32Of = (t: KType): KType => (isVector(t) ? "v4u32" : "u32");
  const constant = (v: number, t: KType): KExpr => (isVector(t) ? splat(lit(v, "u32")) : lit(v, "u32"));
  const asBool = (e: KExpr): KExpr =>
    e.k === "load" && boolBufs.has(e.buf) ? bin("ne", load(e.buf, e.index, u32Of(e.t)), constant(0, e.t)) : e;
  const rewrite = (s0: KStmt): KStmt => {
    const s = mapStmtExprs(s0, asBool);
    if (s.k !== "store" || !boolBufs.has(s.buf)) return s;
    const t = s.value.t;
    return store(s.buf, s.index, select(s.value, constant(1, t), constant(0, t)));
  };
  return {
    ...k,
    bindings: k.bindings.map((b) => (b.t === "bool" ? { ...b, t: "u32" } : b)),
    body: mapStmts(k.body, rewrite),
  };
}
