/**
 * Generic traversals of the kernel IR for legalize rules and emitters: rebuild expressions bottom-up,
 * rewrite statement lists, and visit every expression or statement. Kept apart from the rules so each
 * rule reads as "what changes", not "how to walk".
 */
import type { KExpr, KStmt } from "./ir.ts";

/** Rebuilds `e` bottom-up: children first, then `f` on the node with its new children. */
export function mapExpr(e: KExpr, f: (e: KExpr) => KExpr): KExpr {
  switch (e.k) {
    case "lit":
    case "ref":
    case "id":
      return f(e);
    case "load":
      return f({ ...e, index: mapExpr(e.index, f) });
    case "sload":
      return f({ ...e, index: mapExpr(e.index, f) });
    case "un":
    case "cast":
    case "splat":
    case "lane":
      return f({ ...e, a: mapExpr(e.a, f) });
    case "vec":
      return f({ ...e, parts: e.parts.map((p) => mapExpr(p, f)) });
    case "bin":
      return f({ ...e, a: mapExpr(e.a, f), b: mapExpr(e.b, f) });
    case "select":
      return f({ ...e, cond: mapExpr(e.cond, f), a: mapExpr(e.a, f), b: mapExpr(e.b, f) });
    case "philox":
      return f({ ...e, seed: mapExpr(e.seed, f), step: mapExpr(e.step, f), index: mapExpr(e.index, f) });
  }
}

/** Applies `f` to every expression directly held by a statement (not to nested statements). */
export function mapStmtExprs(s: KStmt, f: (e: KExpr) => KExpr): KStmt {
  const m = (e: KExpr) => mapExpr(e, f);
  switch (s.k) {
    case "let":
      return { ...s, init: m(s.init) };
    case "set":
      return { ...s, value: m(s.value) };
    case "store":
    case "sstore":
      return { ...s, index: m(s.index), value: m(s.value) };
    case "for":
      return { ...s, from: m(s.from), to: m(s.to), step: m(s.step) };
    case "if":
      return { ...s, cond: m(s.cond) };
    case "wg_reduce":
      return { ...s, value: m(s.value) };
    case "barrier":
    case "comment":
      return s;
  }
}

/** Maps every expression in a statement list, recursing into loop and branch bodies. */
export function mapBodyExprs(body: readonly KStmt[], f: (e: KExpr) => KExpr): KStmt[] {
  return body.map((s0) => {
    const s = mapStmtExprs(s0, f);
    if (s.k === "for") return { ...s, body: mapBodyExprs(s.body, f) };
    if (s.k === "if") {
      const then = mapBodyExprs(s.then, f);
      return s.else ? { ...s, then, else: mapBodyExprs(s.else, f) } : { ...s, then };
    }
    return s;
  });
}

/** Calls `f` on every statement (pre-order, nested bodies included). */
export function visitStmts(body: readonly KStmt[], f: (s: KStmt) => void): void {
  for (const s of body) {
    f(s);
    if (s.k === "for") visitStmts(s.body, f);
    if (s.k === "if") {
      visitStmts(s.then, f);
      if (s.else) visitStmts(s.else, f);
    }
  }
}

/** Calls `f` on `e` and every sub-expression (parents before children), without rebuilding anything. */
export function forEachExpr(e: KExpr, f: (e: KExpr) => void): void {
  f(e);
  switch (e.k) {
    case "lit":
    case "ref":
    case "id":
      return;
    case "load":
    case "sload":
      return forEachExpr(e.index, f);
    case "un":
    case "cast":
    case "splat":
    case "lane":
      return forEachExpr(e.a, f);
    case "vec":
      for (const p of e.parts) forEachExpr(p, f);
      return;
    case "bin":
      forEachExpr(e.a, f);
      return forEachExpr(e.b, f);
    case "select":
      forEachExpr(e.cond, f);
      forEachExpr(e.a, f);
      return forEachExpr(e.b, f);
    case "philox":
      forEachExpr(e.seed, f);
      forEachExpr(e.step, f);
      return forEachExpr(e.index, f);
  }
}

/** The expressions a statement holds directly (not those of nested statements). */
export function stmtExprs(s: KStmt): readonly KExpr[] {
  switch (s.k) {
    case "let":
      return [s.init];
    case "set":
      return [s.value];
    case "store":
    case "sstore":
      return [s.index, s.value];
    case "for":
      return [s.from, s.to, s.step];
    case "if":
      return [s.cond];
    case "wg_reduce":
      return [s.value];
    case "barrier":
    case "comment":
      return [];
  }
}

/** Calls `f` on every expression node of every statement, nested bodies included (pre-order). */
export function visitExprs(body: readonly KStmt[], f: (e: KExpr) => void): void {
  visitStmts(body, (s) => {
    for (const e of stmtExprs(s)) forEachExpr(e, f);
  });
}
