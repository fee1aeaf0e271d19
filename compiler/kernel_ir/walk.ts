/**
 * Generic traversals of the kernel IR for legalize rules and emitters: rebuild expressions bottom-up,
 * rewrite statement lists, and visit every expression or statement. Kept apart from the rules so each
 * rule reads as "what changes", not "how to walk".
 */
import type { KExpr, KStmt } from "./ir.ts";

/** The sub-expressions `e` holds directly, in the order they are evaluated. */
export function exprChildren(e: KExpr): readonly KExpr[] {
  switch (e.k) {
    case "lit":
    case "ref":
    case "id":
      return [];
    case "load":
    case "sload":
      return [e.index];
    case "un":
    case "cast":
    case "splat":
    case "lane":
      return [e.a];
    case "vec":
      return e.parts;
    case "bin":
      return [e.a, e.b];
    case "select":
      return [e.cond, e.a, e.b];
    case "philox":
      return [e.seed, e.step, e.index];
  }
}

/** `e` with each sub-expression it holds directly replaced by `f` of it (in `exprChildren`'s order). */
export function mapChildren(e: KExpr, f: (e: KExpr) => KExpr): KExpr {
  switch (e.k) {
    case "lit":
    case "ref":
    case "id":
      return e;
    case "load":
    case "sload":
      return { ...e, index: f(e.index) };
    case "un":
    case "cast":
    case "splat":
    case "lane":
      return { ...e, a: f(e.a) };
    case "vec":
      return { ...e, parts: e.parts.map((p) => f(p)) };
    case "bin":
      return { ...e, a: f(e.a), b: f(e.b) };
    case "select":
      return { ...e, cond: f(e.cond), a: f(e.a), b: f(e.b) };
    case "philox":
      return { ...e, seed: f(e.seed), step: f(e.step), index: f(e.index) };
  }
}

/** Rebuilds `e` bottom-up: children first, then `f` on the node with its new children. */
export function mapExpr(e: KExpr, f: (e: KExpr) => KExpr): KExpr {
  return f(mapChildren(e, (c) => mapExpr(c, f)));
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

/** Rebuilds a statement list: `f` on each statement, after its loop or branch bodies are rebuilt. */
export function mapStmts(body: readonly KStmt[], f: (s: KStmt) => KStmt): KStmt[] {
  return body.map((s) => {
    if (s.k === "for") return f({ ...s, body: mapStmts(s.body, f) });
    if (s.k !== "if") return f(s);
    const then = mapStmts(s.then, f);
    return f(s.else ? { ...s, then, else: mapStmts(s.else, f) } : { ...s, then });
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
  for (const c of exprChildren(e)) forEachExpr(c, f);
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
