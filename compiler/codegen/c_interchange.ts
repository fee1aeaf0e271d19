/**
 * Which loops of a C kernel's thread loop run better outside it (c.ts): a column sum or block-strided loop
 * inside the thread loop is contiguous across threads and strided across its own iterations, so neither
 * vectorizes well; swapping them (`for j { for lid { ... } }`) makes the thread loop the inner, contiguous
 * one. Legal in any run without a barrier, and each thread keeps its own order, so sums are unchanged
 * (DESIGN.md, notes: compiler/codegen/c_interchange.ts).
 */
import type { KExpr, KStmt } from "../kernel_ir/ir.ts";
import { forEachExpr, visitExprs, visitStmts } from "../kernel_ir/walk.ts";

type For = Extract<KStmt, { k: "for" }>;

/**
 * Whether `e` has one value for every thread of a workgroup: it reads only literals, the workgroup id,
 * names in `uniform`, and bindings the kernel never writes (`readOnly`) at such indices. Shared memory is
 * excluded: it changes between phases.
 */
export function isUniform(e: KExpr, uniform: ReadonlySet<string>, readOnly: ReadonlySet<string>): boolean {
  let ok = true;
  forEachExpr(e, (x) => {
    if (x.k === "id" && x.which !== "wg") ok = false;
    else if (x.k === "ref" && !uniform.has(x.name)) ok = false;
    else if (x.k === "load" && !readOnly.has(x.buf)) ok = false;
    else if (x.k === "sload") ok = false;
  });
  return ok;
}

/** The initializers of the kernel's immutable locals declared once (the index math's names). */
export function immutableLets(body: readonly KStmt[]): Map<string, KExpr> {
  const lets = new Map<string, KExpr>();
  const twice = new Set<string>();
  visitStmts(body, (s) => {
    if (s.k === "set") twice.add(s.name);
    if (s.k !== "let") return;
    if (lets.has(s.name) || s.mutable) twice.add(s.name);
    lets.set(s.name, s.init);
  });
  for (const n of twice) lets.delete(n);
  return lets;
}

/**
 * How much an integer index moves when `x` (`lid`, or a loop variable's name) grows by one: exact for
 * sums, differences and products by literals of such terms, through immutable locals; NaN when unknown.
 * A load at an index that does not move with `x` does not move either, nor do the names in `fixed`.
 */
export function stride(
  e: KExpr,
  x: string,
  lets: ReadonlyMap<string, KExpr>,
  fixed: ReadonlySet<string> = new Set(),
  depth = 0,
): number {
  if (depth > 32) return NaN;
  const d = (y: KExpr) => stride(y, x, lets, fixed, depth + 1);
  switch (e.k) {
    case "lit":
      return 0;
    case "id":
      return x === "lid" && e.which !== "wg" ? 1 : 0;
    case "ref": {
      if (e.name === x) return 1;
      if (fixed.has(e.name)) return 0;
      const init = lets.get(e.name);
      return init ? d(init) : NaN;
    }
    case "cast":
      return d(e.a);
    case "load":
      return d(e.index) === 0 ? 0 : NaN;
    case "bin": {
      const a = d(e.a), b = d(e.b);
      if (e.op === "add") return a + b;
      if (e.op === "sub") return a - b;
      if (a === 0 && b === 0) return 0;
      if (e.op === "mul" && a === 0 && e.a.k === "lit") return e.a.v * b;
      if (e.op === "mul" && b === 0 && e.b.k === "lit") return e.b.v * a;
      return NaN;
    }
    default: {
      let moves = false;
      forEachExpr(e, (y) => (moves ||= (y.k === "id" && y.which !== "wg") || y.k === "ref"));
      return moves ? NaN : 0;
    }
  }
}

/**
 * How to run `s`, a loop at the top of a thread loop's run, outside the thread loop, or undefined to
 * leave it inside. `strided`: `for (v = lid + offset; v < to; v += step)`, every bound else uniform: the
 * outer loop walks `base` from offset by step and thread lid takes `v = base + lid` while that is below
 * `to`. `uniform`: from, to and step uniform, and the loop's binding accesses are contiguous across
 * threads (stride 1 in lid) and none contiguous across its iterations (stride 1 in v, not uniform across
 * threads): a column-major walk.
 */
export function interchange(
  s: For,
  uniform: ReadonlySet<string>,
  readOnly: ReadonlySet<string>,
  lets: ReadonlyMap<string, KExpr>,
): { readonly kind: "uniform" } | { readonly kind: "strided"; readonly offset: KExpr } | undefined {
  const u = (e: KExpr) => isUniform(e, uniform, readOnly);
  if (!u(s.step) || !u(s.to)) return undefined;
  const f = s.from;
  const isLid = (e: KExpr) => e.k === "id" && e.which === "lid";
  if (isLid(f)) return { kind: "strided", offset: { k: "lit", t: "i32", v: 0 } };
  if (f.k === "bin" && f.op === "add" && isLid(f.a) && u(f.b)) return { kind: "strided", offset: f.b };
  if (f.k === "bin" && f.op === "add" && isLid(f.b) && u(f.a)) return { kind: "strided", offset: f.a };
  if (!u(f)) return undefined;
  let across = 0, along = 0;
  const fixed = new Set([...uniform, s.v]);
  const visit = (index: KExpr) => {
    const l = stride(index, "lid", lets, fixed), v = stride(index, s.v, lets, uniform);
    if (l === 1 && v !== 1) across++;
    if (v === 1 && l !== 0) along++;
  };
  visitStmts(s.body, (x) => x.k === "store" && visit(x.index));
  visitExprs(s.body, (e) => e.k === "load" && visit(e.index));
  return across > 0 && along === 0 ? { kind: "uniform" } : undefined;
}
